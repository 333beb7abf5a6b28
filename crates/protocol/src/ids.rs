//! Ids the relay and the daemon exchange, as types that cannot be mixed up: a session id is not
//! an instance id, though both are strings on the wire (each serializes as its plain string).
//! JSON-RPC request ids are [`crate::jsonrpc::RequestId`].

use std::{borrow::Borrow, fmt};

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id `s` (not checked: ids are opaque).
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// What logs at INFO and above may show of the id: its first 8 characters and `…`.
            /// A session id is a capability next to the credential (MCP 2025-06-18, Basic /
            /// Security Best Practices, "Session Hijacking"), so the whole id is written only at
            /// DEBUG; 8 characters are enough to tell sessions apart in a log.
            pub fn log_tag(&self) -> String {
                let mut t: String = self.0.chars().take(8).collect();
                if t.len() < self.0.len() {
                    t.push('…');
                }
                t
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

string_id!(
    /// A bridge's name, unique on a relay: the `{bridge}` of `/b/{bridge}/mcp`, the `bridge` of
    /// `hello` and of an enrollment.
    BridgeId
);

string_id!(
    /// A relay-assigned `sid`: an MCP session (`<random>.<HMAC>`, its `MCP-Session-Id`) or a
    /// call (`c` + 43 base64url characters; never holds a `.`). Names it in every link frame.
    SessionId
);

string_id!(
    /// A daemon process's random id, new for every process: a restarted daemon is a new
    /// instance and inherits nothing (DESIGN §5 step 8).
    InstanceId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_strings_on_the_wire() {
        let sid = SessionId::new("a.b");
        assert_eq!(serde_json::to_string(&sid).unwrap(), r#""a.b""#);
        assert_eq!(serde_json::from_str::<SessionId>(r#""a.b""#).unwrap(), sid);
        let map: std::collections::HashMap<SessionId, u8> = [(sid.clone(), 1)].into();
        assert_eq!(map.get("a.b"), Some(&1));
        assert_eq!(sid, "a.b");
    }
}
