//! An owner-only Unix socket server: the transport of the delegation worker socket (what is
//! said on a connection is [`super::serve`]'s, which knows no socket).
//!
//! The socket file is made 0600 right after `bind` (its directory is the caller's, 0700). Every
//! connection's peer uid (`SO_PEERCRED`) is checked before anything else is said: a peer of
//! another user gets the line `{"error":"not_owner"}` and is closed. At most `max_connections`
//! are served at once; one more gets `{"error":"busy"}` and is closed. The rest of a
//! connection is the handler's. Dropping the [`OwnerSocket`] stops the accept loop and every
//! connection, and removes the socket file.

use std::{
    fs, io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    time::Duration,
};

use tokio::{
    io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader},
    net::{UnixListener, UnixStream},
    sync::Semaphore,
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

/// The reading half of an accepted connection.
pub(crate) type Reader = Box<dyn AsyncBufRead + Send + Unpin>;
/// The writing half of an accepted connection.
pub(crate) type Writer = Box<dyn AsyncWrite + Send + Unpin>;
/// Serves one connection of the owner until it ends.
pub(crate) type Handler =
    Arc<dyn Fn(Reader, Writer) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// How long a refusal line may take to write before the connection is dropped anyway.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// Wait after a failed `accept` (out of file descriptors): the error would repeat at once.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A served owner-only socket; see the module docs.
#[derive(Debug)]
pub(crate) struct OwnerSocket {
    path: PathBuf,
    stop: CancellationToken,
}

impl OwnerSocket {
    /// Binds `path` (a file already there is replaced: the caller names sockets so that one
    /// there is stale), makes it 0600 and serves it on the current tokio runtime with
    /// `handler`, at most `max_connections` at once.
    ///
    /// # Errors
    /// No tokio runtime is current; the path is too long for a Unix socket (108 bytes on
    /// Linux) or its directory is missing; binding or `chmod` fails.
    pub(crate) fn bind(path: &Path, max_connections: usize, handler: Handler) -> io::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| io::Error::other(format!("a socket needs a tokio runtime: {e}")))?;
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = {
            let _guard = runtime.enter();
            UnixListener::bind(path)
                .map_err(|e| io::Error::new(e.kind(), format!("binding {}: {e}", path.display())))?
        };
        if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o600)) {
            let _ = fs::remove_file(path);
            return Err(e);
        }
        let stop = CancellationToken::new();
        runtime.spawn(accept_loop(
            listener,
            Arc::new(Semaphore::new(max_connections)),
            handler,
            stop.clone(),
        ));
        Ok(Self {
            path: path.to_owned(),
            stop,
        })
    }

    /// The socket's path.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OwnerSocket {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = fs::remove_file(&self.path);
    }
}

async fn accept_loop(
    listener: UnixListener,
    slots: Arc<Semaphore>,
    handler: Handler,
    stop: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, slots.clone(), handler.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an owner-only socket cannot accept");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
        }
    }
    // Dropping the set aborts the connections.
}

/// Writes `{"error": code}` and closes.
async fn refuse(mut stream: UnixStream, code: &str) {
    let line = format!("{}\n", serde_json::json!({ "error": code }));
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        let _ = stream.write_all(line.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

async fn serve(stream: UnixStream, slots: Arc<Semaphore>, handler: Handler) {
    // The peer's uid first: nothing else is said to another user.
    let owner = nix::unistd::geteuid().as_raw();
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == owner => {}
        Ok(cred) => {
            tracing::warn!(
                uid = cred.uid(),
                "refused a connection of another user on an owner-only socket"
            );
            return refuse(stream, "not_owner").await;
        }
        Err(e) => {
            tracing::debug!(error = %e, "no peer credentials on an owner-only socket");
            return refuse(stream, "not_owner").await;
        }
    }
    let Ok(_slot) = slots.try_acquire_owned() else {
        return refuse(stream, "busy").await;
    };
    let (read, write) = stream.into_split();
    handler(Box::new(BufReader::new(read)), Box::new(write)).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::process::CommandExt;

    use tokio::io::{AsyncBufReadExt, AsyncReadExt};

    use super::*;

    /// The variable that makes [`probe_as_another_user`] connect (to the socket it names).
    const PROBE_VAR: &str = "MACHINE_MCP_TEST_PROBE_SOCKET";

    /// A socket whose handler greets and then waits for the peer to close.
    fn greeter(path: &Path, max: usize) -> OwnerSocket {
        let handler: Handler = Arc::new(|mut read: Reader, mut write: Writer| {
            Box::pin(async move {
                let _ = write.write_all(b"{\"hello\":true}\n").await;
                let mut rest = Vec::new();
                let _ = read.read_to_end(&mut rest).await;
            })
        });
        OwnerSocket::bind(path, max, handler).unwrap()
    }

    async fn first_line(path: &Path) -> (String, UnixStream) {
        let mut stream = UnixStream::connect(path).await.unwrap();
        let mut line = String::new();
        let mut reader = BufReader::new(&mut stream);
        reader.read_line(&mut line).await.unwrap();
        (line, stream)
    }

    #[tokio::test]
    async fn the_owner_is_served_within_the_connection_bound() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("s.sock");
        fs::write(&path, "stale").unwrap();
        let socket = greeter(&path, 1);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (hello, held) = first_line(&path).await;
        assert_eq!(hello, "{\"hello\":true}\n");
        let (busy, _) = first_line(&path).await;
        assert_eq!(busy, "{\"error\":\"busy\"}\n");
        drop(held);
        // The slot comes back once the held connection ended.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (line, _) = first_line(&path).await;
            if line.contains("hello") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{line}");
            tokio::task::yield_now().await;
        }
        drop(socket);
        assert!(!path.exists(), "dropping the socket removes its file");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_connection_of_another_user_is_refused_before_anything_else() {
        // The check is SO_PEERCRED's uid: only root can connect as another user. CI runs the
        // tests as root; elsewhere this test fails rather than pass without checking.
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test must run as root: it connects to the socket as uid 65534"
        );
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("s.sock");
        let _socket = greeter(&path, 4);
        // Let uid 65534 reach the socket: only the uid check stands in its way.
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o711)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();

        let test = format!(
            "{}::probe_as_another_user",
            module_path!().split_once("::").unwrap().1
        );
        let exe = std::env::current_exe().unwrap();
        let probe_path = path.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(exe)
                .args([
                    &test,
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(PROBE_VAR, &probe_path)
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let probe: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once("PROBE ").map(|(_, probe)| probe))
            .collect();
        assert_eq!(
            probe,
            ["uid=65534 {\"error\":\"not_owner\"}"],
            "stdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The owner is still served.
        assert_eq!(first_line(&path).await.0, "{\"hello\":true}\n");
    }

    /// Run by [`a_connection_of_another_user_is_refused_before_anything_else`] as uid 65534:
    /// prints `PROBE uid=UID FIRST-LINE` of the socket named by [`PROBE_VAR`]. Does nothing
    /// when run directly.
    #[test]
    #[ignore = "a helper run as another user by a_connection_of_another_user_is_refused_before_anything_else"]
    fn probe_as_another_user() {
        use std::io::BufRead;
        let Some(socket) = std::env::var_os(PROBE_VAR) else {
            return;
        };
        let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stream)
            .read_line(&mut line)
            .unwrap();
        println!("PROBE uid={} {}", nix::unistd::geteuid(), line.trim_end());
    }
}
