//! The hub's transitions on tokio's paused clock, and the helpers the tests share: `links`
//! (promotion, loss, rebind within the grace, grace expiry, a new instance), `routing` (daemon
//! messages, deadlines, sweeps, calls, bounds), `delivery` (link revision 4: acceptance and
//! retraction), `router` (the same through the routing trait, as the HTTP layer drives it).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::{
    sync::{mpsc, oneshot},
    time::{Duration, advance},
};

use crate::{limits::CALL_BUDGET_MAX, limits::RELAY_OVERHEAD};
use protocol::{
    frame::RelayFrame,
    ids::{InstanceId, SessionId},
    jsonrpc::code,
    limits::{DAEMON_SEQ_WINDOW, DELIVERY_MARGIN, DELIVERY_WINDOW},
};

use super::{Bridge, Delivery, Hub, Link, LinkOrigin, LinkTx, Outbound, ReplySink, Session};
use crate::{
    RelayConfig,
    auth::{BridgePrincipal, Role},
    storage,
    stream::SseStream,
};

/// A hub with bridge `b1`, its storage opened before the clock is paused (SQLite's worker
/// thread would otherwise race the auto-advancing clock).
async fn hub() -> (Arc<Hub>, Arc<Bridge>) {
    let hub = Hub::new(
        storage::memory().await.unwrap(),
        Arc::new(RelayConfig::for_tests()),
        Arc::default(),
    );
    let b = hub.bridge("b1").await;
    tokio::time::pause();
    (hub, b)
}

fn link(hub: &Hub, instance: &str) -> (Link, mpsc::Receiver<Outbound>) {
    link_of_revision(hub, instance, 2)
}

fn link_of_revision(hub: &Hub, instance: &str, revision: u32) -> (Link, mpsc::Receiver<Outbound>) {
    let (tx, rx) = mpsc::channel(64);
    let l = Link {
        id: hub.next_link_id(),
        instance_id: InstanceId::new(instance),
        revision,
        key_id: "key_test".into(),
        clock_skew_ms: 0,
        tx: LinkTx::new(tx),
    };
    (l, rx)
}

fn alice() -> BridgePrincipal {
    BridgePrincipal {
        id: "tok_alice".into(),
        bridge: "b1".into(),
        credential: "tok_alice".into(),
        role: Role::Owner,
    }
}

fn session(hub: &Hub, b: &Arc<Bridge>) -> Arc<Session> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
    hub.create_session(b.clone(), "runtime", alice(), init)
        .unwrap()
}

/// A hub whose bridge `b1` has an active link of instance `i1` (frames readable from `rx`) and
/// one session on it.
struct Connected {
    hub: Arc<Hub>,
    b: Arc<Bridge>,
    l: Link,
    rx: mpsc::Receiver<Outbound>,
    s: Arc<Session>,
}

async fn connected() -> Connected {
    let (hub, b) = hub().await;
    let (l, rx) = link(&hub, "i1");
    assert!(hub.promote(&b, l.clone()).is_none());
    let s = session(&hub, &b);
    Connected { hub, b, l, rx, s }
}

/// Delivers daemon message `seq` as the socket of `b1`'s instance `i1` sends it.
fn deliver(
    hub: &Hub,
    sid: &SessionId,
    seq: u64,
    related: Option<&Value>,
    message: Value,
) -> Delivery {
    let i1 = InstanceId::new("i1");
    let from = LinkOrigin {
        bridge: "b1",
        instance: &i1,
    };
    hub.deliver(from, sid, seq, related, message)
}

fn request(id: i64, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
}

/// Registers and sends request `id`, answered to a JSON waiter.
fn json_request(hub: &Hub, s: &Arc<Session>, link: &Link, id: i64) -> oneshot::Receiver<Value> {
    let (tx, rx) = oneshot::channel();
    let m = request(id, "tools/call");
    hub.register_request(s, &json!(id), &m, ReplySink::json(tx))
        .unwrap();
    hub.send_session(s, link, m).unwrap();
    rx
}

/// Registers and sends request `id`, answered to an SSE stream.
fn sse_request(
    hub: &Hub,
    s: &Arc<Session>,
    link: &Link,
    id: i64,
    token: Option<&str>,
) -> Arc<SseStream> {
    let st = SseStream::new(&s.sid, &s.principal.id, &s.bridge.name);
    let mut m = request(id, "tools/call");
    if let Some(t) = token {
        m["params"]["_meta"] = json!({"progressToken": t});
    }
    hub.register_request(s, &json!(id), &m, ReplySink::stream(st.clone()))
        .unwrap();
    hub.send_session(s, link, m).unwrap();
    st
}

fn frames(rx: &mut mpsc::Receiver<Outbound>) -> Vec<RelayFrame> {
    let mut out = Vec::new();
    while let Ok(o) = rx.try_recv() {
        if let Outbound::Frame(f) = o {
            out.push(f);
        }
    }
    out
}

/// The messages of a stream after its priming event.
fn messages(st: &SseStream) -> Vec<Value> {
    st.read_after(Some(0))
        .0
        .into_iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect()
}

fn result(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}})
}

fn gauge(a: &std::sync::atomic::AtomicI64) -> i64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

fn counter(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

/// Lets the spawned timers that are due run (the clock is paused).
async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

mod delivery;
mod links;
mod router;
mod routing;
