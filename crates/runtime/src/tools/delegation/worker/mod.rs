//! Workers that delegate: the capability a running delegation gets, and the
//! owner-only Unix socket through which its worker MCP server (`machine-mcp delegation
//! worker-mcp`, [`super::worker_mcp`], started by the agent) calls back into the [`Manager`],
//! which sees this side as [`Workers`]. The socket itself (bind, peer uid, connection bound) is
//! [`socket`]'s; the lines and the challenge are [`wire`]'s, shared with the worker MCP
//! server; serving a connection is `serve`'s.
//!
//! One socket per server process: `DIR/sockets/PID.sock` (`DIR` is `STATE_DIR/delegations`;
//! the directory 0700, the socket 0600; sockets of dead PIDs are removed at start). The socket
//! protocol, one JSON object per line, each at most [`DELEGATION_SOCKET_FRAME_MAX_BYTES`](crate::limits::DELEGATION_SOCKET_FRAME_MAX_BYTES)
//! (a longer line is answered `{"error":"frame_too_large"}` and the connection closed):
//!
//! 1. The server checks the peer's uid (`SO_PEERCRED`) before anything else: another user gets
//!    `{"error":"not_owner"}` and the connection is closed. Past
//!    [`DELEGATION_SOCKET_CONNECTIONS_MAX`] connections at once: `{"error":"busy"}`, closed.
//! 2. Server: `{"challenge":"<64 hex>"}` (32 random bytes). Client, within
//!    [`DELEGATION_SOCKET_AUTH_TIMEOUT`](crate::limits::DELEGATION_SOCKET_AUTH_TIMEOUT): `{"request_id":"…","mac":"<64 hex>"}`, the
//!    HMAC-SHA256 ([`wire::challenge_mac`]) keyed with the capability's 32 bytes. Unknown request,
//!    revoked capability or wrong MAC: `{"error":"invalid_capability"}`, closed; a malformed
//!    answer `{"error":"invalid_request"}`, no answer in time `{"error":"timeout"}`, closed.
//!    Success: `{"authenticated":true,"request_id":"…"}`.
//! 3. Requests `{"id":N,"op":"delegate","agent","prompt","path"?,"request_id"}` (`path`
//!    defaults to `.`, the project directory),
//!    `{"id":N,"op":"read","request_id","wait_ms"}`, `{"id":N,"op":"list"}`, answered (in any
//!    order, at most [`DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX`](crate::limits::DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX) in flight) by
//!    `{"id":N,"result":…}` (a receipt; for `list` `{"delegations":[…]}`) or
//!    `{"id":N,"error":{"code","message","retryable","side_effects_started",…details}}`
//!    ([`ToolError::to_json`](crate::ToolError::to_json)). Each request re-checks the capability: once the run ended
//!    ([`Workers::revoke`]) the answer is `{"id":N,"error":{"code":"invalid_capability"…}}`
//!    and the connection is closed.
//!
//! A worker's `delegate` is confined to its grant's project directory (symlinks resolved;
//! outside → `path_boundary`) and made with [`Origin::Worker`](super::engine::Origin::Worker); `read` and `list` see the
//! worker's own tree only ([`Scope::Tree`](super::engine::Scope::Tree)).

mod serve;
pub(crate) mod socket;
#[cfg(test)]
mod tests;
mod wire;

use std::{
    collections::HashMap,
    fmt, fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Weak},
};

use lock::Lock;

use rand::{RngCore, rngs::OsRng};

use crate::limits::DELEGATION_SOCKET_CONNECTIONS_MAX;

use super::engine::{
    Manager,
    agents::WorkerMcp,
    workers::{Grant, Workers},
};
use crate::primitives::private;

use socket::{Handler, OwnerSocket, Reader, Writer};
pub(crate) use wire::{
    CAPABILITY_VAR, FrameError, REQUEST_VAR, SOCKET_VAR, challenge_mac, read_frame, write_frame,
};

/// Bytes of a capability token and of a challenge.
const TOKEN_BYTES: usize = 32;
/// The subcommand of this binary that serves a worker's MCP (`machine-mcp delegation worker-mcp`).
const WORKER_MCP_ARGS: [&str; 2] = ["delegation", "worker-mcp"];

/// A capability token; `Debug` does not show it.
struct Token([u8; TOKEN_BYTES]);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

/// A live capability: its token, a serial telling it apart from any later grant of the same
/// request id, and what it allows.
#[derive(Debug)]
struct Live {
    token: Token,
    serial: u64,
    grant: Grant,
}

/// The state the socket's tasks share with [`WorkerAccess`].
#[derive(Debug)]
struct Shared {
    live: Lock<Capabilities>,
    manager: Weak<Manager>,
}

/// The live capabilities by request id, and the next serial.
#[derive(Debug, Default)]
struct Capabilities {
    by_request: HashMap<String, Live>,
    next_serial: u64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Capabilities> {
        self.live.lock()
    }

    /// The grant of `request_id` when its capability is still the one of `serial`.
    fn still_live(&self, request_id: &str, serial: u64) -> Option<Grant> {
        self.lock()
            .by_request
            .get(request_id)
            .filter(|l| l.serial == serial)
            .map(|l| l.grant.clone())
    }
}

/// The worker side of a server's delegations: capabilities and the socket that honours them.
/// Dropping it stops the socket (connections included) and removes its file.
#[derive(Debug)]
pub(crate) struct WorkerAccess {
    /// Served while this lives.
    _socket: OwnerSocket,
    /// The socket's path as a string (checked UTF-8 at start: it goes into an env var).
    socket_text: String,
    program: PathBuf,
    shared: Arc<Shared>,
}

impl WorkerAccess {
    /// Binds `dir/sockets/<pid>.sock` (the directory created 0700, the socket 0600; sockets of
    /// dead PIDs in it are removed first) and serves it on the current tokio runtime, calling
    /// back into `manager` for the three operations (module docs). The worker MCP program is
    /// this process's executable.
    ///
    /// # Errors
    /// No tokio runtime is current; the directory cannot be created or is not owned by this
    /// user; the socket path is not UTF-8 or too long for a Unix socket (108 bytes on Linux);
    /// binding fails.
    pub(crate) fn start(dir: &Path, manager: Weak<Manager>) -> io::Result<Arc<Self>> {
        let sockets = dir.join("sockets");
        private::create_dir(&sockets)?;
        let meta = fs::symlink_metadata(&sockets)?;
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory of this user; remove it",
                    sockets.display()
                ),
            ));
        }
        remove_stale_sockets(&sockets);
        // Ours by PID: a file there is left by an earlier process with the same PID.
        let path = sockets.join(format!("{}.sock", std::process::id()));
        let socket_text = path
            .to_str()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the worker socket path {} is not UTF-8", path.display()),
                )
            })?
            .to_owned();
        let shared = Arc::new(Shared {
            live: Lock::new(Capabilities::default()),
            manager,
        });
        let served = shared.clone();
        let handler: Handler = Arc::new(move |read: Reader, write: Writer| {
            Box::pin(serve::serve_connection(read, write, served.clone()))
        });
        let socket = OwnerSocket::bind(&path, DELEGATION_SOCKET_CONNECTIONS_MAX, handler)?;
        Ok(Arc::new(Self {
            _socket: socket,
            socket_text,
            program: crate::programs::own_binary_for_others(this_program()),
            shared,
        }))
    }

    /// The socket's path.
    #[cfg(test)]
    pub(crate) fn socket(&self) -> &Path {
        self._socket.path()
    }

    /// A capability for a run that starts: a random 256-bit token bound to `grant` (a grant
    /// already live for the same request is replaced). Returns the variables the agent (and
    /// through it the worker MCP server) gets: [`SOCKET_VAR`], [`REQUEST_VAR`],
    /// [`CAPABILITY_VAR`]. Empty (the worker cannot delegate, and says so when asked) when the
    /// system's random source fails.
    pub(crate) fn grant(&self, grant: Grant) -> Vec<(String, String)> {
        let mut token = [0u8; TOKEN_BYTES];
        if let Err(e) = OsRng.try_fill_bytes(&mut token) {
            tracing::error!(error = %e, "no random source for a delegation capability");
            return Vec::new();
        }
        let capability = hex::encode(token);
        let request_id = grant.request_id.clone();
        {
            let mut live = self.shared.lock();
            live.next_serial += 1;
            let serial = live.next_serial;
            live.by_request.insert(
                request_id.clone(),
                Live {
                    token: Token(token),
                    serial,
                    grant,
                },
            );
        }
        vec![
            (SOCKET_VAR.to_owned(), self.socket_text.clone()),
            (REQUEST_VAR.to_owned(), request_id),
            (CAPABILITY_VAR.to_owned(), capability),
        ]
    }

    /// The run of `request_id` ended: its capability stops working at once (a connection
    /// authenticated with it gets `invalid_capability` on its next request). Unknown ids are
    /// ignored.
    pub(crate) fn revoke(&self, request_id: &str) {
        self.shared.lock().by_request.remove(request_id);
    }

    /// Capabilities live now (running delegations that got one).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.shared.lock().by_request.len()
    }

    /// The MCP server an agent starts for its worker: this binary with
    /// `delegation worker-mcp`, inheriting the three variables of [`WorkerAccess::grant`].
    pub(crate) fn worker_mcp(&self) -> WorkerMcp {
        WorkerMcp {
            program: self.program.clone(),
            args: WORKER_MCP_ARGS.iter().map(|s| (*s).to_owned()).collect(),
            env_names: [SOCKET_VAR, REQUEST_VAR, CAPABILITY_VAR]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }
}

impl Workers for WorkerAccess {
    fn grant(&self, grant: Grant) -> Vec<(String, String)> {
        WorkerAccess::grant(self, grant)
    }

    fn revoke(&self, request_id: &str) {
        WorkerAccess::revoke(self, request_id);
    }

    fn worker_mcp(&self) -> WorkerMcp {
        WorkerAccess::worker_mcp(self)
    }
}

/// This process's executable; after an upgrade replaced it, the path where the new one is.
fn this_program() -> PathBuf {
    match std::env::current_exe() {
        Ok(p) => {
            let s = p.to_string_lossy();
            match s.strip_suffix(" (deleted)") {
                Some(live) => PathBuf::from(live),
                None => p,
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell this executable; workers will look for machine-mcp on PATH");
            PathBuf::from("machine-mcp")
        }
    }
}

/// Removes `PID.sock` files in `sockets` whose process is gone.
fn remove_stale_sockets(sockets: &Path) {
    let Ok(entries) = fs::read_dir(sockets) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if gone {
            let _ = fs::remove_file(entry.path());
        }
    }
}
