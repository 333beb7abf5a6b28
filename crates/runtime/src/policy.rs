//! Policy: what this runtime may do at all (the daemon ceiling of DESIGN §3).
//!
//! A [`Policy`] starts from a named [`Profile`] and may be changed by [`PolicyOverrides`]
//! (the `--exec-mode`, `--no-write`, `--unrestricted-paths`, `--absolute-paths` and `--full-env`
//! flags). When the result differs from the named profile in any capability it reports itself as
//! `custom`. Tools are listed and allowed according to their [`Capability`].
//!
//! A [`Principal`] is who calls: the third part of a call's authority (DESIGN §3), since process
//! sessions and tasks belong to the principal that created them.

use schemars::JsonSchema;
use serde::Serialize;

/// Who is calling. Process sessions and jobs belong to the principal that created them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(String);

impl Principal {
    /// The local user of a stdio session.
    pub fn local() -> Self {
        Principal("local".to_owned())
    }

    /// A named principal (for example a relay account or token id).
    pub fn named(id: impl Into<String>) -> Self {
        Principal(id.into())
    }

    /// The principal's id.
    pub fn id(&self) -> &str {
        &self.0
    }
}

/// A named starting point for the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Everything: writes, shell commands, any path, inherited environment, absolute paths.
    Full,
    /// A coding agent: file tools and process working directories confined to the workspace,
    /// writes, programs from an argv (never through the server's shell, yet any program, run
    /// with the user's rights), isolated environment.
    Agent,
    /// Edits inside the workspace, no processes.
    Edit,
    /// Read-only inside the workspace.
    Review,
}

impl Profile {
    /// The profile's name as shown to users (`full`, `agent`, `edit`, `review`).
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Agent => "agent",
            Profile::Edit => "edit",
            Profile::Review => "review",
        }
    }

    /// Parses a profile name.
    ///
    /// # Errors
    /// An unknown name, with the accepted ones in the message.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "full" => Ok(Profile::Full),
            "agent" => Ok(Profile::Agent),
            "edit" => Ok(Profile::Edit),
            "review" => Ok(Profile::Review),
            other => Err(format!(
                "unknown profile {other:?} (expected full, agent, edit or review)"
            )),
        }
    }

    fn capabilities(self) -> Capabilities {
        match self {
            Profile::Full => Capabilities {
                write: true,
                exec: ExecMode::Shell,
                unrestricted_paths: true,
                full_env: true,
                absolute_paths: true,
            },
            Profile::Agent => Capabilities {
                write: true,
                exec: ExecMode::Direct,
                unrestricted_paths: false,
                full_env: false,
                absolute_paths: false,
            },
            Profile::Edit => Capabilities {
                write: true,
                exec: ExecMode::Off,
                unrestricted_paths: false,
                full_env: false,
                absolute_paths: false,
            },
            Profile::Review => Capabilities {
                write: false,
                exec: ExecMode::Off,
                unrestricted_paths: false,
                full_env: false,
                absolute_paths: false,
            },
        }
    }
}

/// How processes may be started. Ordered: `Off < Direct < Shell`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExecMode {
    /// No processes.
    Off,
    /// Processes from an argv, never through a shell.
    Direct,
    /// Also shell command lines (`exec_command`).
    Shell,
}

impl ExecMode {
    /// Parses `off`, `direct` or `shell`.
    ///
    /// # Errors
    /// Any other word, with the accepted ones in the message.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "off" => Ok(ExecMode::Off),
            "direct" => Ok(ExecMode::Direct),
            "shell" => Ok(ExecMode::Shell),
            other => Err(format!(
                "unknown exec mode {other:?} (expected off, direct or shell)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Capabilities {
    write: bool,
    exec: ExecMode,
    unrestricted_paths: bool,
    full_env: bool,
    absolute_paths: bool,
}

/// Changes to a named profile; `None` keeps the profile's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyOverrides {
    /// `--exec-mode`.
    pub exec_mode: Option<ExecMode>,
    /// `--no-write`: forbid every write.
    pub no_write: bool,
    /// `--unrestricted-paths[=BOOL]`.
    pub unrestricted_paths: Option<bool>,
    /// `--absolute-paths[=BOOL]`.
    pub absolute_paths: Option<bool>,
    /// `--full-env[=BOOL]`: children inherit the whole environment.
    pub full_env: Option<bool>,
}

/// What a tool needs from the policy to be listed and called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Reading files and metadata: always allowed.
    Read,
    /// Creating, changing or deleting files.
    Write,
    /// Starting processes from an argv (exec mode `direct` or `shell`).
    ExecDirect,
    /// Running shell command lines (exec mode `shell`).
    ExecShell,
}

/// The effective policy of a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    base: Profile,
    caps: Capabilities,
}

impl Policy {
    /// The named profile with `overrides` applied.
    pub fn new(profile: Profile, overrides: PolicyOverrides) -> Self {
        let mut caps = profile.capabilities();
        if let Some(exec) = overrides.exec_mode {
            caps.exec = exec;
        }
        if overrides.no_write {
            caps.write = false;
        }
        if let Some(v) = overrides.unrestricted_paths {
            caps.unrestricted_paths = v;
        }
        if let Some(v) = overrides.absolute_paths {
            caps.absolute_paths = v;
        }
        if let Some(v) = overrides.full_env {
            caps.full_env = v;
        }
        Self {
            base: profile,
            caps,
        }
    }

    /// A named profile unchanged.
    pub fn profile(profile: Profile) -> Self {
        Self::new(profile, PolicyOverrides::default())
    }

    /// `full`, `agent`, `edit`, `review`, or `custom` when overrides changed the named profile.
    pub fn name(&self) -> &'static str {
        if self.caps == self.base.capabilities() {
            self.base.as_str()
        } else {
            "custom"
        }
    }

    /// The profile this policy started from.
    pub fn base_profile(&self) -> Profile {
        self.base
    }

    /// Whether file writes are allowed.
    pub fn write(&self) -> bool {
        self.caps.write
    }

    /// The exec mode.
    pub fn exec_mode(&self) -> ExecMode {
        self.caps.exec
    }

    /// Whether paths may leave the workspace.
    pub fn unrestricted_paths(&self) -> bool {
        self.caps.unrestricted_paths
    }

    /// Whether children inherit the whole environment (otherwise an isolated one).
    pub fn full_env(&self) -> bool {
        self.caps.full_env
    }

    /// Whether returned paths are absolute (otherwise workspace-relative).
    pub fn absolute_paths(&self) -> bool {
        self.caps.absolute_paths
    }

    /// Whether a tool needing `cap` is listed and may be called.
    pub fn allows(&self, cap: Capability) -> bool {
        match cap {
            Capability::Read => true,
            Capability::Write => self.caps.write,
            Capability::ExecDirect => self.caps.exec >= ExecMode::Direct,
            Capability::ExecShell => self.caps.exec >= ExecMode::Shell,
        }
    }

    /// The intersection of this policy and `role`'s profile: each capability is the narrower of
    /// the two (DESIGN §3 "Authority": never a union, nothing elevates). Named after whichever
    /// profile it equals, else `custom`.
    #[must_use = "returns the narrowed policy; self is unchanged"]
    pub fn intersect(&self, role: Profile) -> Policy {
        let r = role.capabilities();
        let caps = Capabilities {
            write: self.caps.write && r.write,
            exec: self.caps.exec.min(r.exec),
            unrestricted_paths: self.caps.unrestricted_paths && r.unrestricted_paths,
            full_env: self.caps.full_env && r.full_env,
            absolute_paths: self.caps.absolute_paths && r.absolute_paths,
        };
        let base = if caps == self.caps { self.base } else { role };
        Policy { base, caps }
    }

    /// The policy as reported by `server_info`.
    pub fn view(&self) -> PolicyView {
        PolicyView {
            profile: self.name().to_owned(),
            write: self.caps.write,
            exec_mode: self.caps.exec,
            unrestricted_paths: self.caps.unrestricted_paths,
            full_env: self.caps.full_env,
            absolute_paths: self.caps.absolute_paths,
        }
    }
}

/// The effective policy as reported to clients.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PolicyView {
    /// `full`, `agent`, `edit`, `review` or `custom`.
    pub profile: String,
    /// File writes allowed.
    pub write: bool,
    /// How processes may be started.
    pub exec_mode: ExecMode,
    /// Paths may leave the workspace.
    pub unrestricted_paths: bool,
    /// Child processes inherit the whole environment.
    pub full_env: bool,
    /// Returned paths are absolute.
    pub absolute_paths: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_profiles_report_their_name() {
        for p in [
            Profile::Full,
            Profile::Agent,
            Profile::Edit,
            Profile::Review,
        ] {
            assert_eq!(Policy::profile(p).name(), p.as_str());
        }
    }

    #[test]
    fn narrowing_a_profile_makes_it_custom() {
        let p = Policy::new(
            Profile::Full,
            PolicyOverrides {
                no_write: true,
                ..Default::default()
            },
        );
        assert_eq!(p.name(), "custom");
        assert!(!p.write());
        let p = Policy::new(
            Profile::Agent,
            PolicyOverrides {
                exec_mode: Some(ExecMode::Off),
                ..Default::default()
            },
        );
        assert_eq!(p.name(), "custom");
        assert!(!p.allows(Capability::ExecDirect));
    }

    #[test]
    fn an_override_equal_to_the_profile_keeps_the_name() {
        let p = Policy::new(
            Profile::Agent,
            PolicyOverrides {
                exec_mode: Some(ExecMode::Direct),
                unrestricted_paths: Some(false),
                ..Default::default()
            },
        );
        assert_eq!(p.name(), "agent");
    }

    #[test]
    fn intersection_never_elevates() {
        let review_daemon = Policy::profile(Profile::Review);
        for role in [
            Profile::Full,
            Profile::Agent,
            Profile::Edit,
            Profile::Review,
        ] {
            let p = review_daemon.intersect(role);
            assert!(!p.write() && p.exec_mode() == ExecMode::Off && !p.unrestricted_paths());
        }
        let full = Policy::profile(Profile::Full);
        assert_eq!(full.intersect(Profile::Full), full);
        let op = full.intersect(Profile::Agent);
        assert_eq!(op.name(), "agent");
        assert!(!op.unrestricted_paths() && op.exec_mode() == ExecMode::Direct);
        assert_eq!(full.intersect(Profile::Review).name(), "review");
        let custom = Policy::new(
            Profile::Full,
            PolicyOverrides {
                no_write: true,
                ..Default::default()
            },
        );
        let p = custom.intersect(Profile::Agent);
        assert!(!p.write());
        assert_eq!(p.name(), "custom");
    }

    #[test]
    fn capabilities_follow_exec_mode_order() {
        let agent = Policy::profile(Profile::Agent);
        assert!(agent.allows(Capability::ExecDirect));
        assert!(!agent.allows(Capability::ExecShell));
        let full = Policy::profile(Profile::Full);
        assert!(full.allows(Capability::ExecShell));
        let review = Policy::profile(Profile::Review);
        assert!(!review.allows(Capability::Write));
        assert!(review.allows(Capability::Read));
    }
}
