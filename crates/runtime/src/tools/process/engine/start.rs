//! Starting a child, with pipes or a terminal as its stdio: the same file for both, found and run
//! the way `execvp(3)` would in the child ([`program`]), and every failure to start reported as
//! the error of the start, never as a child that dies.
//!
//! Rules:
//! - A bare name `execvp` would find on the child's `PATH` is started by that path (no copy of
//!   this process, [`program`]); when that file cannot be started (a missing interpreter), it is
//!   started by its name again, so that `execvp` goes on along `PATH`.
//! - A path the kernel cannot run (`ENOEXEC`: a script without `#!`) is run with
//!   [`SHELL`], as `execvp` runs it.
//! - A terminal child leads a session of its own with the terminal as its controlling terminal
//!   (`setsid(2)`, `TIOCSCTTY`), as a shell started by a terminal emulator does; a pipe child
//!   leads a process group of its own. Either way its group is the tree's group.
//! - No descriptor is closed before `exec` beyond what is close-on-exec (every descriptor this
//!   process opens is): the standard library reports an `exec` failure through one of them.

use std::{
    ffi::{OsStr, OsString},
    fs::File,
    os::unix::fs::OpenOptionsExt,
    path::Path,
    process::Stdio,
};

use super::{SHELL, Spawn, program, tree};

/// What the child's stdin, stdout and stderr are.
pub(super) enum Stdios {
    /// Pipes (stdin a pipe when `stdin`, else `/dev/null`).
    Pipes { stdin: bool },
    /// The slave side of a terminal, opened by its path, for all three.
    Terminal(File),
}

impl Stdios {
    /// The slave side of the terminal named `tty` (a master's `tty_name`), opened read-write
    /// without becoming this process's controlling terminal.
    ///
    /// # Errors
    /// The terminal cannot be opened.
    pub(super) fn terminal(tty: &Path) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(tty)?;
        Ok(Self::Terminal(f))
    }
}

/// Starts `spec.argv` in `spec.cwd` with exactly `spec.env` plus the tag of a new process tree
/// ([`tree`]), with `stdios`; returns the child and its tree.
///
/// # Errors
/// The empty argv (`InvalidInput`); a program that cannot be started, with the error of its last
/// attempt (`NotFound` when nothing is found, `PermissionDenied`, …); a terminal that cannot be
/// given to the child.
pub(super) fn start(
    spec: &Spawn,
    stdios: &Stdios,
) -> std::io::Result<(tokio::process::Child, tree::Tree)> {
    let (program, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
    let tag = tree::Tree::new_tag();
    let (tree_key, tree_value) = tree::env_var(&tag);
    let forks_before = tree::forks_so_far();
    // `by`: the file to start; `argv0` and `first`: the child's argv before `args`.
    let spawn = |by: &OsStr, argv0: &OsStr, first: Option<&OsString>| {
        let mut cmd = tokio::process::Command::new(by);
        cmd.arg0(argv0)
            .args(first)
            .args(args)
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env(&tree_key, &tree_value)
            .kill_on_drop(false);
        configure(&mut cmd, stdios)?;
        cmd.spawn()
    };
    let by_name = || spawn(program, program, None);
    let spawned = match program::resolve(program, &spec.env, &spec.cwd) {
        Some(path) => spawn(path.as_os_str(), program, None).or_else(|_| by_name()),
        None => by_name(),
    };
    let child = match spawned {
        Err(e)
            if e.raw_os_error() == Some(libc::ENOEXEC)
                && program.as_encoded_bytes().contains(&b'/') =>
        {
            spawn(SHELL.as_ref(), SHELL.as_ref(), Some(program))?
        }
        spawned => spawned?,
    };
    let tree = tree::Tree::new(child.id().unwrap_or(0), tag, forks_before);
    Ok((child, tree))
}

/// Gives `cmd` its stdio and, for a terminal, a session of its own with that terminal.
///
/// One of the workspace's two places of `unsafe` (the lint is `deny`): the standard library has
/// no safe way to run `setsid` and `TIOCSCTTY` in the child between `fork` and `exec`.
#[allow(unsafe_code)]
fn configure(cmd: &mut tokio::process::Command, stdios: &Stdios) -> std::io::Result<()> {
    match stdios {
        Stdios::Pipes { stdin } => {
            cmd.process_group(0)
                .stdin(if *stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        Stdios::Terminal(tty) => {
            cmd.stdin(tty.try_clone()?)
                .stdout(tty.try_clone()?)
                .stderr(tty.try_clone()?);
            // SAFETY: the closure calls only async-signal-safe functions (signal, sigprocmask,
            // setsid, ioctl) and allocates nothing, as required between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    // Dispositions a terminal program expects at their defaults (an ignored
                    // signal stays ignored across exec).
                    for signo in [
                        libc::SIGCHLD,
                        libc::SIGHUP,
                        libc::SIGINT,
                        libc::SIGQUIT,
                        libc::SIGTERM,
                        libc::SIGALRM,
                    ] {
                        libc::signal(signo, libc::SIG_DFL);
                    }
                    if libc::setsid() == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // stdin is the terminal by now: make it the controlling terminal, so that
                    // resizes reach the child as SIGWINCH and job control works.
                    if libc::ioctl(0, libc::TIOCSCTTY as _, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
    }
    Ok(())
}
