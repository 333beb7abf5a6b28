//! Upstream children: a session of an upstream server is one child process speaking
//! newline-delimited JSON-RPC on its stdio; it ends (its process group killed) when the session
//! stops or the child exits.

use std::sync::Arc;

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    sync::mpsc,
};

use super::{HostedSession, HostedSessions};

pub(super) async fn run_upstream(
    sessions: Arc<HostedSessions>,
    host: Arc<HostedSession>,
    mut child: tokio::process::Child,
    mut rx: mpsc::Receiver<String>,
    name: String,
) {
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    if let Some(err) = stderr {
        let name = name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                tracing::debug!(server = %name, "{l}");
            }
        });
    }
    let reader = async {
        let Some(out) = stdout else { return };
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Value>(&line) {
                Ok(v) if v.is_object() => sessions.emit(&host, v, None),
                _ => tracing::debug!(server = %name, "ignoring a non-JSON-RPC line on stdout"),
            }
        }
    };
    let writer = async {
        while let Some(line) = rx.recv().await {
            let Some(w) = stdin.as_mut() else { break };
            if w.write_all(line.as_bytes()).await.is_err()
                || w.write_all(b"\n").await.is_err()
                || w.flush().await.is_err()
            {
                break;
            }
        }
    };
    tokio::select! {
        _ = reader => {}
        _ = writer => {}
        _ = host.stop.cancelled() => {}
        _ = child.wait() => {}
    }
    drop(stdin);
    if let Some(pid) = pid {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    sessions.ended(&host.sid, &format!("upstream server {name} exited"));
}
