//! Heap allocations per relayed call on the daemon, pinned as counts (not times, so a busy
//! machine cannot make it fail): a built-in `read_file` of 4 KiB through a session (legacy era)
//! and as a single MCP 2026-07-28 request (a hosted call), from the link frame in to the
//! response frame out.
//!
//! The counts are this binary's allocations (every thread) averaged over [`CALLS`] calls after
//! a warm-up; the binary holds only this test, so nothing else allocates meanwhile. A bound is
//! the count measured when it was set plus a margin for allocator-independent noise (hash map
//! growth, channel blocks): a change that makes a call allocate more than that fails here, and
//! one that makes it allocate less should lower the bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use machine_bridge_daemon::sessions::HostedSessions;
use protocol::{
    frame::{DaemonFrame, RUNTIME_SERVER},
    ids::SessionId,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Counts allocations (and reallocations, which may move) of the whole process.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counter
// is a relaxed atomic with no effect on the memory handed out.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Calls measured per era, after [`WARM_UP`] calls that fill caches and pools.
const CALLS: u64 = 200;
const WARM_UP: u64 = 20;

/// Allocations of one legacy-era `read_file` of 4 KiB in an open session: 133 when set.
const SESSION_CALL_MAX: u64 = 138;
/// Allocations of one MCP 2026-07-28 `read_file` of 4 KiB (a hosted call): 215 when set.
const HOSTED_CALL_MAX: u64 = 222;

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn read_file(id: u64, meta: Option<Value>) -> Value {
    let mut params = json!({"name": "read_file", "arguments": {"path": "four.txt"}});
    if let Some(m) = meta {
        params["_meta"] = m;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// The response to `sid`'s request (notifications skipped), acknowledged as the relay would.
async fn response(
    s: &Arc<HostedSessions>,
    rx: &mut mpsc::Receiver<DaemonFrame>,
    sid: &SessionId,
) -> Arc<Value> {
    loop {
        let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("a frame in time")
            .expect("the link is open");
        if let DaemonFrame::Rpc {
            sid: s_,
            seq,
            message,
            ..
        } = f
            && &s_ == sid
            && message.get("method").is_none()
        {
            s.ack(sid, seq);
            return message;
        }
    }
}

fn check(message: &Value) {
    assert_eq!(
        message["result"]["structuredContent"]["content"]
            .as_str()
            .map(str::len),
        Some(4096),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_read_file_allocates_no_more_than_its_pinned_count_in_either_era() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("four.txt"), "x".repeat(4096)).unwrap();
    let rt = runtime::Runtime::new(runtime::RuntimeConfig {
        workspace: dir.path().into(),
        policy: runtime::policy::Policy::profile(runtime::Profile::Full),
        default_yield_after: None,
        remote: true,
        state_dir: None,
        own_files: Vec::new(),
    })
    .unwrap();
    let s = HostedSessions::new(Arc::new(rt), Vec::new());
    let (tx, mut rx) = mpsc::channel(1024);
    s.resume(&[], &[], tx);

    // Legacy era: one session, requests in turn.
    let session = SessionId::from("s1");
    s.open(
        &session,
        RUNTIME_SERVER,
        "tok",
        "owner",
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
    );
    s.rpc(
        &session,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let mut per_session_call = 0;
    for round in 0..2 {
        let n = if round == 0 { WARM_UP } else { CALLS };
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for id in 1..=n {
            s.rpc(&session, read_file(id, None));
            check(&*response(&s, &mut rx, &session).await);
        }
        per_session_call = (ALLOCATIONS.load(Ordering::Relaxed) - before) / n;
    }

    // 2026-07-28: a hosted call per request, closed once answered.
    let mut per_hosted_call = 0;
    for round in 0..2 {
        let n = if round == 0 { WARM_UP } else { CALLS };
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for id in 1..=n {
            let sid = SessionId::from(format!("c{round}-{id}").as_str());
            s.call(
                &sid,
                RUNTIME_SERVER,
                "tok",
                "owner",
                read_file(id, Some(meta())),
            );
            check(&*response(&s, &mut rx, &sid).await);
        }
        per_hosted_call = (ALLOCATIONS.load(Ordering::Relaxed) - before) / n;
    }
    eprintln!(
        "allocations per read_file of 4 KiB: session {per_session_call}, hosted call {per_hosted_call}"
    );
    assert!(
        per_session_call <= SESSION_CALL_MAX,
        "a session call allocates {per_session_call} times (bound {SESSION_CALL_MAX})"
    );
    assert!(
        per_hosted_call <= HOSTED_CALL_MAX,
        "a hosted call allocates {per_hosted_call} times (bound {HOSTED_CALL_MAX})"
    );
}
