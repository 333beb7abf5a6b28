//! Which file `run_process` runs: the one `execvp(3)` would run in the child (its `PATH`, its
//! working directory, `/bin/sh` for a file the kernel cannot run).

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

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
