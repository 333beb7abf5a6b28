//! Which file `run_process` runs: the one `execvp(3)` would run in the child (its `PATH`, its
//! working directory, `/bin/sh` for a file the kernel cannot run).

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::util::{Server, Tree};

fn executable(t: &Tree, path: &str, text: &str) {
    let p = t.path().join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `execvp` goes on along `PATH` when a file cannot be started (`ENOENT` from a missing
/// interpreter) and runs the next one; the lookup that finds the file first must not stop there.
#[test]
fn a_file_on_path_whose_interpreter_is_missing_is_skipped_like_execvp_does() {
    let t = Tree::new();
    executable(&t, "a/prog", "#!/nonexistent/interpreter\n");
    executable(&t, "b/prog", "#!/bin/sh\necho second\n");
    let mut s = Server::start(t.path(), &[]);
    let path = format!(
        "{}:{}",
        t.path().join("a").display(),
        t.path().join("b").display()
    );
    let r = s.call(
        "run_process",
        json!({"argv": ["prog"], "env": {"PATH": path}}),
    );
    let out = r.ok();
    assert_eq!(out["exit_code"], 0, "{out:?}");
    assert_eq!(out["stdout"], "second\n", "{out:?}");
}

/// A file without `#!` runs with `/bin/sh`, found on `PATH` or named by a path, and a script
/// found through a relative `PATH` entry sees the path `execvp` built as its `$0`.
#[test]
fn scripts_without_an_interpreter_line_run_with_sh_and_see_execvps_path() {
    let t = Tree::new();
    executable(&t, "bin/plain", "echo \"plain 0=$0\"\n");
    let mut s = Server::start(t.path(), &[]);
    let by_path = s.call("run_process", json!({"argv": ["./bin/plain"]}));
    assert_eq!(
        by_path.ok()["stdout"],
        "plain 0=./bin/plain\n",
        "{:?}",
        by_path.ok()
    );
    let on_path = s.call(
        "run_process",
        json!({"argv": ["plain"], "env": {"PATH": "bin:/usr/bin:/bin"}}),
    );
    assert_eq!(
        on_path.ok()["stdout"],
        "plain 0=bin/plain\n",
        "{:?}",
        on_path.ok()
    );
}

/// The output of the terminal session `argv` starts in `s` (with `env`) once it exited, and its
/// exit code.
fn pty_run(s: &mut Server, argv: serde_json::Value, env: serde_json::Value) -> (String, Value) {
    let r = s.call(
        "start_process",
        json!({"argv": argv, "env": env, "pty": true, "rows": 24, "cols": 80}),
    );
    let id = r.ok()["session_id"].as_str().unwrap().to_owned();
    let st = s.call(
        "read_process",
        json!({"session_id": id, "wait_ms": 10000, "wait_for_exit": true}),
    );
    let out = st.ok();
    (
        out["stdout"]["data"].as_str().unwrap_or("").to_owned(),
        out["exit_code"].clone(),
    )
}

/// A terminal session finds its program as a pipe session does: a relative path with a `/` in
/// the working directory, a bare name along the child's `PATH` past a file whose interpreter is
/// missing, and a file without `#!` run with `/bin/sh`.
#[test]
fn a_terminal_session_finds_its_program_like_execvp() {
    let t = Tree::new();
    executable(&t, "bin/tool", "#!/bin/sh\necho tool ran\n");
    executable(&t, "a/prog", "#!/nonexistent/interpreter\n");
    executable(&t, "b/prog", "#!/bin/sh\necho second\n");
    executable(&t, "bin/plain", "echo plain ran\n");
    let mut s = Server::start(t.path(), &[]);
    let (out, code) = pty_run(&mut s, json!(["bin/tool"]), json!({}));
    assert!(out.contains("tool ran"), "{out:?}");
    assert_eq!(code, 0);
    let path = format!(
        "{}:{}",
        t.path().join("a").display(),
        t.path().join("b").display()
    );
    let (out, code) = pty_run(&mut s, json!(["prog"]), json!({"PATH": path}));
    assert!(out.contains("second"), "{out:?}");
    assert_eq!(code, 0);
    let (out, code) = pty_run(&mut s, json!(["./bin/plain"]), json!({}));
    assert!(out.contains("plain ran"), "{out:?}");
    assert_eq!(code, 0);
}

/// A program a terminal session cannot start is a tool error at `start_process`, as for a pipe
/// session, never a session that ends by a signal.
#[test]
fn a_terminal_session_whose_program_cannot_start_is_an_error() {
    let t = Tree::new();
    executable(&t, "bin/broken", "#!/nonexistent/interpreter\n");
    let mut s = Server::start(t.path(), &[]);
    for argv in [json!(["./bin/broken"]), json!(["no-such-program-here"])] {
        let pipes = s.call("start_process", json!({"argv": argv}));
        let pty = s.call(
            "start_process",
            json!({"argv": argv, "pty": true, "rows": 24, "cols": 80}),
        );
        assert_eq!(pty.code(), pipes.code(), "{argv}: {}", pty.error);
        assert_eq!(pty.error["message"], pipes.error["message"]);
    }
    let broken = s.call("run_process", json!({"argv": ["./bin/broken"]}));
    let message = broken.error["message"].as_str().unwrap_or("");
    assert!(
        message.contains("interpreter") && !message.contains("PATH"),
        "{message}"
    );
}

/// A working directory that does not exist is named as such, not as "not a directory".
#[test]
fn a_missing_working_directory_is_named_as_missing() {
    let t = Tree::new();
    std::fs::write(t.path().join("file"), "x").unwrap();
    let mut s = Server::start(t.path(), &[]);
    let missing = s.call("run_process", json!({"argv": ["true"], "cwd": "nope"}));
    assert_eq!(missing.code(), "invalid_request");
    let message = missing.error["message"].as_str().unwrap_or("");
    assert!(message.contains("does not exist"), "{message}");
    let file = s.call("run_process", json!({"argv": ["true"], "cwd": "file"}));
    let message = file.error["message"].as_str().unwrap_or("");
    assert!(message.contains("not a directory"), "{message}");
}
