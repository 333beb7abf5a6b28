//! [`LinkState`]: which daemon instance a bridge's sessions belong to, and whether its socket is
//! there (DESIGN §5 steps 6 and 8; invariants 3 and 4).
//!
//! ```text
//!            promote(link)                    lose(link.id)
//!  Unbound ───────────────► Active(link) ───────────────► Detached { instance, since }
//!     ▲                      │    ▲  promote(other link)          │      │
//!     │                      └────┘  (replaces the incumbent)     │      │ promote(link)
//!     │                                                           │      ▼
//!     └─────────────────── expire(now, grace) ◄───────────────────┘   Active(link)
//! ```
//!
//! The state is private to this module: the transitions below are the only way to change it.
//! What a transition means for the sessions (rebinding, ending a previous instance's sessions)
//! is the caller's ([`super::Hub::promote`], [`super::Hub::link_lost`], [`super::Hub::sweep`]).

use protocol::ids::InstanceId;
use tokio::time::{Duration, Instant};

use super::bridge::Link;

#[derive(Debug, Default)]
enum State {
    /// No instance owns the bridge's sessions: never connected, or the last one did not come
    /// back within the grace.
    #[default]
    Unbound,
    /// A verified socket of the bound instance serves the bridge.
    Active(Link),
    /// The socket of `instance` was lost at `since`; its sessions wait for it.
    Detached {
        instance: InstanceId,
        since: Instant,
    },
}

/// What a promotion replaced.
#[derive(Debug)]
#[must_use = "the replaced incumbent must be closed"]
pub(crate) struct Promoted {
    /// The incumbent socket, now replaced: the caller closes it (4012).
    pub(crate) replaced: Option<Link>,
    /// An instance was bound before (active or detached): this is a reconnect.
    pub(crate) was_bound: bool,
    /// The bridge was detached (its in-flight requests counted as detached until now).
    pub(crate) was_detached: bool,
}

/// A bridge's link state; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct LinkState(State);

impl LinkState {
    /// The active socket, if any.
    pub(crate) fn active(&self) -> Option<&Link> {
        match &self.0 {
            State::Active(link) => Some(link),
            _ => None,
        }
    }

    /// The instance the bridge's sessions are bound to: the active one, or the detached one
    /// within the grace.
    pub(crate) fn bound_instance(&self) -> Option<&InstanceId> {
        match &self.0 {
            State::Unbound => None,
            State::Active(link) => Some(&link.instance_id),
            State::Detached { instance, .. } => Some(instance),
        }
    }

    /// Whether the bridge's socket is gone and its sessions wait for it (within the grace).
    pub(crate) fn is_detached(&self) -> bool {
        matches!(self.0, State::Detached { .. })
    }

    /// The state of a bridge whose sessions a restarted relay restored, bound to `instance`:
    /// detached since `since` (the restart), so that only a verified socket of that instance
    /// rebinds them, within the grace.
    pub(crate) fn restored(instance: InstanceId, since: Instant) -> Self {
        Self(State::Detached { instance, since })
    }

    /// `link` (verified: probed, resumed, ready) becomes the active socket, whatever the state.
    pub(crate) fn promote(&mut self, link: Link) -> Promoted {
        let previous = std::mem::replace(&mut self.0, State::Active(link));
        match previous {
            State::Unbound => Promoted {
                replaced: None,
                was_bound: false,
                was_detached: false,
            },
            State::Active(old) => Promoted {
                replaced: Some(old),
                was_bound: true,
                was_detached: false,
            },
            State::Detached { .. } => Promoted {
                replaced: None,
                was_bound: true,
                was_detached: true,
            },
        }
    }

    /// The socket `link_id` is gone: if it is the active one, the bridge is detached from `now`
    /// and this returns true; a socket that is not the active one (a candidate, or an incumbent
    /// already replaced) changes nothing.
    pub(crate) fn lose(&mut self, link_id: u64, now: Instant) -> bool {
        match &self.0 {
            State::Active(link) if link.id == link_id => {
                self.0 = State::Detached {
                    instance: link.instance_id.clone(),
                    since: now,
                };
                true
            }
            _ => false,
        }
    }

    /// When the bridge has been detached for `grace` or longer at `now`, it becomes unbound and
    /// this returns the instance whose sessions must end.
    pub(crate) fn expire(&mut self, now: Instant, grace: Duration) -> Option<InstanceId> {
        match &self.0 {
            State::Detached { since, .. } if now.duration_since(*since) >= grace => {
                match std::mem::take(&mut self.0) {
                    State::Detached { instance, .. } => Some(instance),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::hub::bridge::LinkTx;

    fn link(id: u64, instance: &str) -> Link {
        Link {
            id,
            instance_id: InstanceId::new(instance),
            revision: 2,
            key_id: "key_test".into(),
            clock_skew_ms: 0,
            tx: LinkTx::new(mpsc::channel(1).0),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bridge_detaches_only_when_its_active_socket_goes_and_unbinds_after_the_grace() {
        let grace = Duration::from_secs(120);
        let mut s = LinkState::default();
        assert!(s.bound_instance().is_none());
        let p = s.promote(link(1, "i1"));
        assert!(p.replaced.is_none() && !p.was_bound && !p.was_detached);
        assert!(
            !s.lose(2, Instant::now()),
            "a candidate's loss changes nothing"
        );
        assert_eq!(s.active().map(|l| l.id), Some(1));
        assert!(s.lose(1, Instant::now()));
        assert!(s.active().is_none());
        assert_eq!(s.bound_instance().map(InstanceId::as_str), Some("i1"));
        tokio::time::advance(grace - Duration::from_millis(1)).await;
        assert_eq!(
            s.expire(Instant::now(), grace),
            None,
            "still within the grace"
        );
        let p = s.promote(link(3, "i1"));
        assert!(p.replaced.is_none() && p.was_bound && p.was_detached);
        assert!(s.lose(3, Instant::now()));
        tokio::time::advance(grace).await;
        assert_eq!(
            s.expire(Instant::now(), grace)
                .map(|i| i.as_str().to_owned()),
            Some("i1".to_owned())
        );
        assert!(s.bound_instance().is_none());
        assert_eq!(s.expire(Instant::now(), grace), None, "expires once");
    }

    #[test]
    fn promoting_over_an_active_socket_hands_back_the_incumbent() {
        let mut s = LinkState::default();
        let _ = s.promote(link(1, "i1"));
        let p = s.promote(link(2, "i2"));
        assert_eq!(p.replaced.map(|l| l.id), Some(1));
        assert!(p.was_bound && !p.was_detached);
        assert_eq!(s.bound_instance().map(InstanceId::as_str), Some("i2"));
        assert!(
            !s.lose(1, Instant::now()),
            "the replaced socket's loss changes nothing"
        );
    }
}
