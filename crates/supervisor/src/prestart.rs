//! The first worker, started before the supervisor parses its own arguments, so that the two
//! processes load the binary at the same time instead of one after the other (loading it —
//! relocations and page faults — is most of a start).
//!
//! Rules:
//! - Only for `machine-mcp stdio ARGS` as the host starts it: arguments that begin with
//!   `stdio` and hold none of `--worker`, `--no-supervisor`, `--help`/`-h`, `--version`/`-V`.
//!   Anything else starts no early worker; the supervisor then starts its first one as usual.
//! - The early worker runs the supervisor's own running file ([`OWN_EXE`]), never the file the
//!   path names now: before the supervisor has looked at the path nothing from it is run. Its
//!   argv0 is the path the host started the supervisor by, as for every worker.
//! - It waits at a gate, its first stdin line, before it runs its command or writes a byte.
//!   Before the gate it only does what has no effect outside it: it parses its arguments, sets
//!   up logging and builds its async runtime, and a mistake there ends it silently (the
//!   supervisor makes the same mistake and reports it). [`WORKER_GATE_LINE`] lets it go on
//!   (`Prestarted::open`, by [`crate::supervise`]); end of input or any other line ends it
//!   at once, silently, with status 0. So a start that the supervisor refuses (bad arguments,
//!   a missing workspace) reports its error once, and a worker the supervisor would not have
//!   started (the path names another file) never runs its command.
//! - It is adopted only when it is the worker the supervisor would start itself: the same
//!   worker arguments and the same file (`Prestarted::adoptable`); otherwise it is killed.
//! - A `Prestarted` that is dropped kills its process and reaps it.
//!
//! [`OWN_EXE`]: runtime::programs::OWN_EXE

use std::{
    ffi::OsString,
    io::Read,
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Stdio},
};

use lock::Lock;

use crate::binary::{self, FileId};

/// The worker argument that makes a worker wait at the gate (hidden; added by [`prestart`]).
pub const WORKER_GATE_FLAG: &str = "--worker-gate";

/// The line (without its `\n`) that opens the gate.
pub const WORKER_GATE_LINE: &[u8] = b"go";

/// The early worker of this process, if [`prestart`] started one and nobody took it yet.
static PRESTARTED: Lock<Option<Prestarted>> = Lock::new(None);

/// A worker process waiting at its gate, with the worker arguments it was started with.
#[derive(Debug)]
pub(crate) struct Prestarted {
    child: Option<Child>,
    args: Vec<OsString>,
}

impl Prestarted {
    /// Whether this is the worker a supervisor would start first: `worker_args` are its
    /// arguments and `program` is the file it runs (compared by device, inode, size and
    /// modification time).
    pub(crate) fn adoptable(&self, worker_args: &[OsString], program: &Path) -> bool {
        let own = FileId::of(Path::new(runtime::programs::OWN_EXE));
        let wanted = FileId::of(program);
        self.args == gated(worker_args.to_vec())
            && matches!((own, wanted), (Some(a), Some(b)) if a.same_binary(&b))
    }

    /// The process, to be run as a worker; the caller opens its gate by writing
    /// [`WORKER_GATE_LINE`] first on its stdin.
    pub(crate) fn open(mut self) -> Option<Child> {
        self.child.take()
    }
}

impl Drop for Prestarted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the first worker of `machine-mcp stdio ARGS` early (`args`: this process's
/// arguments without argv0) and keeps it for [`crate::supervise`]. Does nothing for other
/// arguments (see the module's rules) or when the process cannot be started: the supervisor
/// then starts its first worker itself.
pub fn prestart(args: &[OsString]) {
    if !is_supervised_stdio(args) {
        return;
    }
    let worker_args = gated(binary::worker_args(args));
    let argv0 = std::env::args_os()
        .next()
        .unwrap_or_else(|| "machine-mcp".into());
    let child = std::process::Command::new(runtime::programs::OWN_EXE)
        .arg0(binary::invoked_path(&argv0))
        .args(&worker_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    if let Ok(child) = child {
        let early = Prestarted {
            child: Some(child),
            args: worker_args,
        };
        *PRESTARTED.lock() = Some(early);
    }
}

/// The early worker [`prestart`] started, once.
pub(crate) fn take() -> Option<Prestarted> {
    PRESTARTED.lock().take()
}

/// Whether this process is a gated worker (its arguments hold [`WORKER_GATE_FLAG`]).
pub fn is_gated_worker() -> bool {
    std::env::args_os().any(|a| a == WORKER_GATE_FLAG)
}

/// Names a worker process (`comm`, what `ps -e`, `pgrep` and `killall` match) after its argv0's
/// file name, at most 15 bytes: a worker started from the running file (`/proc/self/exe`)
/// would otherwise be called `exe`. Does nothing for other processes.
pub fn name_worker() {
    let mut args = std::env::args_os();
    let argv0 = args.next();
    if !args.any(|a| a == "--worker") {
        return;
    }
    let Some(name) = argv0.as_deref().map(Path::new).and_then(Path::file_name) else {
        return;
    };
    let mut bytes = std::os::unix::ffi::OsStrExt::as_bytes(name).to_vec();
    bytes.truncate(15);
    if let Ok(name) = std::ffi::CString::new(bytes) {
        let _ = nix::sys::prctl::set_name(&name);
    }
}

/// For a gated worker, before it runs its command: reads its stdin up to the first `\n`, one
/// byte at a time (nothing after the line is consumed). `true` when the line is
/// [`WORKER_GATE_LINE`]: go on; `false` on end of input, a read error or any other line: exit
/// at once without a word.
pub fn pass_gate() -> bool {
    use std::os::fd::AsFd;
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return false;
    };
    let mut input = std::fs::File::from(fd);
    let mut line = Vec::with_capacity(WORKER_GATE_LINE.len());
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return line == WORKER_GATE_LINE,
            Ok(1) if line.len() < WORKER_GATE_LINE.len() => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
}

/// `args` (worker arguments) with [`WORKER_GATE_FLAG`] after `--worker`.
fn gated(mut args: Vec<OsString>) -> Vec<OsString> {
    let at = args
        .iter()
        .position(|a| a == "--worker")
        .map_or(0, |i| i + 1);
    args.insert(at, WORKER_GATE_FLAG.into());
    args
}

/// Whether `args` start a supervised `machine-mcp stdio` (see the module's rules).
fn is_supervised_stdio(args: &[OsString]) -> bool {
    args.first().is_some_and(|a| a == "stdio")
        && !args.iter().any(|a| {
            [
                "--worker",
                "--no-supervisor",
                "--help",
                "-h",
                "--version",
                "-V",
            ]
            .iter()
            .any(|f| a == f)
                || a.to_str().is_some_and(|s| s.starts_with("--worker"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_a_plain_supervised_stdio_start_is_prestarted() {
        assert!(is_supervised_stdio(&os(&["stdio"])));
        assert!(is_supervised_stdio(&os(&[
            "stdio",
            "--workspace",
            "/w",
            "--profile",
            "agent"
        ])));
        for no in [
            &["connect"][..],
            &["--log-level", "debug", "stdio"],
            &["stdio", "--worker"],
            &["stdio", "--no-supervisor"],
            &["stdio", "--help"],
            &["stdio", "-h"],
            &["stdio", "-V"],
            &["stdio", "--worker-gate"],
            &[],
        ] {
            assert!(!is_supervised_stdio(&os(no)), "{no:?}");
        }
    }

    #[test]
    fn the_gate_flag_follows_worker() {
        assert_eq!(
            gated(binary::worker_args(&os(&["stdio", "--workspace", "/w"]))),
            os(&["stdio", "--worker", WORKER_GATE_FLAG, "--workspace", "/w"])
        );
    }

    #[test]
    fn an_early_worker_is_adopted_only_with_the_same_arguments_and_file() {
        let args = os(&["stdio", "--workspace", "/w"]);
        let early = Prestarted {
            child: None,
            args: gated(binary::worker_args(&args)),
        };
        let worker_args = binary::worker_args(&args);
        let own = std::fs::canonicalize(runtime::programs::OWN_EXE).unwrap();
        assert!(early.adoptable(&worker_args, &own));
        let other = binary::worker_args(&os(&["stdio", "--workspace", "/v"]));
        assert!(!early.adoptable(&other, &own));
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("machine-mcp");
        std::fs::copy(&own, &copy).unwrap();
        assert!(!early.adoptable(&worker_args, &copy), "another file");
    }
}
