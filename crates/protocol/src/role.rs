//! The roles a remote caller may hold on a bridge (DESIGN §3 "Authority").
//!
//! The relay attaches a role to every session and call it forwards (from the static bearer token
//! or the OAuth account that authenticated the caller); the daemon intersects the role's profile
//! with its own policy. Roles never widen a policy, they only narrow it.

use serde::{Deserialize, Serialize};

/// A caller's role on a bridge, from most to least authority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything the daemon policy allows (profile `full`).
    Owner,
    /// A coding agent: writes and argv processes inside the workspace (profile `agent`).
    Operator,
    /// Edits, no processes (profile `edit`).
    Editor,
    /// Read-only (profile `review`).
    Reviewer,
}

impl Role {
    /// Every role, most authority first.
    pub const ALL: [Role; 4] = [Role::Owner, Role::Operator, Role::Editor, Role::Reviewer];

    /// The role's name as it appears on the wire, in the store and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Operator => "operator",
            Role::Editor => "editor",
            Role::Reviewer => "reviewer",
        }
    }

    /// What the role lets a caller do, in one line for people (consent page, CLI listings).
    pub fn allows(self) -> &'static str {
        match self {
            Role::Owner => "everything the machine's policy allows: read, write, run programs, Git",
            Role::Operator => {
                "read and write files and run programs without a shell, inside the workspace"
            }
            Role::Editor => "read and write files inside the workspace; no programs",
            Role::Reviewer => "read files, search and Git history inside the workspace; no changes",
        }
    }

    /// Parses a role name.
    ///
    /// # Errors
    /// An unknown name, with the accepted ones in the message.
    pub fn parse(s: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!("unknown role {s:?} (expected owner, operator, editor or reviewer)")
            })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Ok(r));
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::json!(r.as_str())
            );
        }
        assert!(
            Role::parse("admin")
                .unwrap_err()
                .contains("owner, operator")
        );
    }
}
