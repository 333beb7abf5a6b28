//! Git tools on real repositories, and their confinement.

use std::{path::Path, process::Command, time::Duration};

use serde_json::json;

use crate::util::{Server, Tree};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with two commits, a staged change, an unstaged change and an untracked file.
fn repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Ada Lovelace"]);
    git(dir, &["config", "user.email", "ada@example.com"]);
    std::fs::write(dir.join("a.txt"), "one\ntwo\n").unwrap();
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "first commit"]);
    std::fs::write(dir.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(dir.join("b.txt"), "bee\n").unwrap();
    git(dir, &["add", "a.txt", "b.txt"]);
    git(dir, &["commit", "-q", "-m", "second commit\n\nwith a body"]);
    std::fs::write(dir.join("b.txt"), "bee\nstaged\n").unwrap();
    git(dir, &["add", "b.txt"]);
    std::fs::write(dir.join("a.txt"), "one\nTWO\nthree\n").unwrap();
    std::fs::write(dir.join("new.txt"), "untracked\n").unwrap();
}

#[test]
fn status_diff_log_show_and_commit() {
    let t = Tree::new();
    repo(t.path());
    let mut s = Server::start_with_env(
        t.path(),
        &["--profile", "agent"],
        &[("HOME", t.path().to_str().unwrap())],
    );
    let st = s.call("git_status", json!({})).ok().clone();
    assert_eq!(st["branch"]["head"], "main");
    assert_eq!(st["clean"], false);
    let entries = st["entries"].as_array().unwrap();
    let find = |p: &str| {
        entries
            .iter()
            .find(|e| e["path"] == p)
            .unwrap_or_else(|| panic!("{p} in {entries:?}"))
    };
    assert_eq!(find("a.txt")["worktree"], "M");
    assert_eq!(find("b.txt")["index"], "M");
    assert_eq!(find("new.txt")["kind"], "untracked");

    let d = s.call("git_diff", json!({})).ok().clone();
    assert!(d["diff"].as_str().unwrap().contains("-two\n+TWO"), "{d}");
    assert_eq!(d["files"][0]["path"], "a.txt");
    assert_eq!(d["files"][0]["added"], 1);
    let d = s.call("git_diff", json!({"staged": true})).ok().clone();
    assert!(d["diff"].as_str().unwrap().contains("+staged"));
    let d = s
        .call("git_diff", json!({"path": "b.txt", "max_bytes": 20}))
        .ok()
        .clone();
    assert_eq!(d["diff"], "", "b.txt has no unstaged change");

    let log = s.call("git_log", json!({})).ok().clone();
    let commits = log["commits"].as_array().unwrap();
    assert_eq!(commits.len(), 2);
    assert_eq!(commits[0]["subject"], "second commit");
    assert_eq!(commits[0]["author"], "Ada Lovelace");
    assert!(commits[0].get("email").is_none(), "e-mail only when asked");
    let log = s
        .call(
            "git_log",
            json!({"count": 1, "include_email": true, "path": "a.txt"}),
        )
        .ok()
        .clone();
    assert_eq!(log["commits"][0]["email"], "ada@example.com");
    let log = s
        .call("git_log", json!({"revision": "HEAD~1"}))
        .ok()
        .clone();
    assert_eq!(log["commits"][0]["subject"], "first commit");

    let show = s.call("git_show", json!({"revision": "HEAD"})).ok().clone();
    assert_eq!(show["message"], "second commit\n\nwith a body");
    assert!(show["diff"].as_str().unwrap().contains("+++ b/b.txt"));

    let c = s
        .call("git_commit", json!({"message": "third: staged only"}))
        .ok()
        .clone();
    assert_eq!(c["subject"], "third: staged only");
    assert_eq!(c["branch"], "main");
    assert_eq!(git(t.path(), &["rev-parse", "HEAD"]).trim(), c["commit"]);
    // Only the staged change was committed: a.txt is still modified, new.txt untracked.
    let porcelain = git(t.path(), &["status", "--porcelain"]);
    assert!(
        porcelain.contains(" M a.txt") && porcelain.contains("?? new.txt"),
        "{porcelain}"
    );
    let r = s.call("git_commit", json!({"message": "nothing"}));
    assert_eq!(r.code(), "conflict", "nothing staged");
}

#[test]
fn option_like_refs_are_rejected_and_create_no_file() {
    let t = Tree::new();
    repo(t.path());
    let target = t.path().join("pwned.txt");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    for rev in [format!("--output={}", target.display()), "-p".to_owned()] {
        assert_eq!(
            s.call("git_log", json!({"revision": rev})).code(),
            "invalid_request"
        );
        assert_eq!(
            s.call("git_show", json!({"revision": rev})).code(),
            "invalid_request"
        );
    }
    // A path that looks like an option is only ever a pathspec.
    let r = s.call("git_log", json!({"path": "--output=pwned2.txt"}));
    assert!(r.is_error && r.code() == "not_found", "{:?}", r.error);
    assert!(!target.exists());
    assert!(!t.path().join("pwned2.txt").exists());
}

#[test]
fn repositories_outside_the_workspace_are_denied_under_agent() {
    let t = Tree::new();
    // 1. The workspace is a subdirectory of a repository.
    let outer = t.path().join("outer");
    std::fs::create_dir_all(outer.join("ws")).unwrap();
    repo(&outer);
    let mut s = Server::start(&outer.join("ws"), &["--profile", "agent"]);
    assert_eq!(s.call("git_status", json!({})).code(), "path_boundary");
    // 2. A .git file pointing at a git directory outside.
    let ws2 = t.path().join("ws2");
    std::fs::create_dir_all(&ws2).unwrap();
    std::fs::write(
        ws2.join(".git"),
        format!("gitdir: {}\n", outer.join(".git").display()),
    )
    .unwrap();
    let mut s = Server::start(&ws2, &["--profile", "agent"]);
    assert_eq!(s.call("git_status", json!({})).code(), "path_boundary");
    assert_eq!(s.call("git_log", json!({})).code(), "path_boundary");
    // 3. A symlinked .git.
    let ws3 = t.path().join("ws3");
    std::fs::create_dir_all(&ws3).unwrap();
    std::os::unix::fs::symlink(outer.join(".git"), ws3.join(".git")).unwrap();
    let mut s = Server::start(&ws3, &["--profile", "agent"]);
    assert_eq!(s.call("git_diff", json!({})).code(), "path_boundary");
    assert_eq!(
        s.call("git_commit", json!({"message": "x", "allow_empty": true}))
            .code(),
        "path_boundary"
    );
    // Under full the same repository is reachable.
    let mut s = Server::start(&ws3, &[]);
    assert_eq!(
        s.call("git_status", json!({})).ok()["branch"]["head"],
        "main"
    );
}

#[test]
fn commit_is_refused_during_a_merge() {
    let t = Tree::new();
    let d = t.path();
    repo(d);
    git(d, &["commit", "-q", "-m", "stage b"]);
    git(d, &["checkout", "-q", "-b", "other", "HEAD~1"]);
    std::fs::write(d.join("a.txt"), "one\nOTHER\nthree\n").unwrap();
    git(d, &["commit", "-q", "-am", "other side"]);
    git(d, &["checkout", "-q", "main"]);
    git(d, &["checkout", "-q", "--", "a.txt"]);
    std::fs::write(d.join("a.txt"), "one\nMAIN\nthree\n").unwrap();
    git(d, &["commit", "-q", "-am", "main side"]);
    let merge = Command::new("git")
        .args(["merge", "other"])
        .current_dir(d)
        .env("HOME", d)
        .output()
        .unwrap();
    assert!(!merge.status.success(), "the merge conflicts");
    assert!(d.join(".git/MERGE_HEAD").exists());
    let mut s = Server::start(d, &["--profile", "agent"]);
    let st = s.call("git_status", json!({})).ok().clone();
    assert!(
        st["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "unmerged")
    );
    let r = s.call(
        "git_commit",
        json!({"message": "resolve", "allow_empty": true}),
    );
    assert_eq!(r.code(), "conflict");
    assert!(r.error["message"].as_str().unwrap().contains("merge"));
}

#[test]
fn policies_gate_git_commit_and_writes_into_dot_git() {
    let t = Tree::new();
    repo(t.path());
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    assert_eq!(
        s.call("git_commit", json!({"message": "x"})).code(),
        "policy_denied"
    );
    assert!(
        !s.call("git_status", json!({})).is_error,
        "reading git needs no exec mode"
    );
    let r = s.call(
        "write_file",
        json!({"path": ".git/hooks/post-checkout", "content": "#!/bin/sh\n"}),
    );
    assert_eq!(r.code(), "policy_denied");
    let r = s.call("edit_file", json!({"path": ".git/config", "old_text": "[core]", "new_text": "[core]\n\tfsmonitor = /bin/evil"}));
    assert_eq!(r.code(), "policy_denied");
    assert!(!t.path().join(".git/hooks/post-checkout").exists());
    // On a case-insensitive file system (macOS, Windows) ".GIT" is the same directory
    // (adversarial report F11); the message reads as one sentence.
    let r = s.call(
        "write_file",
        json!({"path": ".GIT/config", "content": "[filter \"x\"]\n"}),
    );
    assert_eq!(r.code(), "policy_denied");
    assert!(
        !r.error["message"].as_str().unwrap().contains("  "),
        "{:?}",
        r.error
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "write_file",
        json!({"path": ".git/info/exclude", "content": "*.log\n"}),
    );
    assert!(!r.is_error, "with an exec mode the write is allowed");
}

/// Regression (adversarial report F11): `git_diff` ran a `filter.<driver>.clean` command from
/// the repository's config, i.e. any program, under a profile with no exec mode at all.
#[test]
fn repository_configured_filters_never_run_even_under_review() {
    let t = Tree::new();
    repo(t.path());
    let marker = t.path().join("filter-ran");
    let helper = t.path().join("filter.sh");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\necho ran >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let h = helper.to_str().unwrap();
    // A plain driver, one whose name has dots and capitals (subsection names keep both), and
    // one that is only a long-running `process` filter; all marked required.
    for (name, var) in [
        ("evil", "clean"),
        ("evil", "smudge"),
        ("My.Filter", "clean"),
        ("proc", "process"),
    ] {
        git(t.path(), &["config", &format!("filter.{name}.{var}"), h]);
        git(
            t.path(),
            &["config", &format!("filter.{name}.required"), "true"],
        );
    }
    std::fs::write(
        t.path().join(".gitattributes"),
        "a.txt filter=evil\nb.txt filter=My.Filter\nnew.txt filter=proc\n",
    )
    .unwrap();
    // Touch every tracked file so git must re-read (and would filter) their contents.
    std::thread::sleep(Duration::from_millis(1100));
    for f in ["a.txt", "b.txt"] {
        let body = std::fs::read(t.path().join(f)).unwrap();
        std::fs::write(t.path().join(f), body).unwrap();
    }
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let diff = s.call("git_diff", json!({}));
    assert!(!diff.is_error, "{:?}", diff.content);
    assert!(diff.structured["diff"].as_str().unwrap().contains("+TWO"));
    assert!(!s.call("git_diff", json!({"staged": true})).is_error);
    assert!(!s.call("git_status", json!({})).is_error);
    assert!(!s.call("git_show", json!({"revision": "HEAD"})).is_error);
    assert!(!s.call("git_log", json!({"path": "a.txt"})).is_error);
    assert!(
        !marker.exists(),
        "a repository-configured filter ran: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
}

#[test]
fn repository_configured_helpers_never_run() {
    let t = Tree::new();
    repo(t.path());
    let marker = t.path().join("helper-ran");
    let helper = t.path().join("helper.sh");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\ntouch {}\ncat\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let h = helper.to_str().unwrap();
    git(t.path(), &["config", "core.fsmonitor", h]);
    git(t.path(), &["config", "diff.external", h]);
    git(t.path(), &["config", "diff.txt.textconv", h]);
    git(t.path(), &["config", "core.pager", h]);
    std::fs::write(t.path().join(".gitattributes"), "*.txt diff=txt\n").unwrap();
    std::fs::create_dir_all(t.path().join(".git/hooks")).unwrap();
    let hook = t.path().join(".git/hooks/pre-commit");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    assert!(!s.call("git_status", json!({})).is_error);
    assert!(!s.call("git_diff", json!({})).is_error);
    assert!(!s.call("git_diff", json!({"staged": true})).is_error);
    assert!(!s.call("git_show", json!({"revision": "HEAD"})).is_error);
    assert!(!s.call("git_log", json!({})).is_error);
    assert!(
        !s.call("git_commit", json!({"message": "hooks must not run"}))
            .is_error
    );
    assert!(
        !marker.exists(),
        "a repository-configured helper or hook ran"
    );
}

/// Regression (adversarial report F12): `git_show` of a revision that is not a commit was an
/// `internal_error`, and a cut diff claimed a "total" that was only the bytes kept.
#[test]
fn show_refuses_non_commits_and_small_pages_continue_exactly() {
    let t = Tree::new();
    repo(t.path());
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    for rev in ["HEAD:a.txt", "^HEAD", "HEAD^{tree}"] {
        let r = s.call("git_show", json!({"revision": rev}));
        assert_eq!(r.code(), "invalid_request", "{rev}: {:?}", r.error);
        assert!(
            r.error["message"]
                .as_str()
                .unwrap()
                .contains("not a commit"),
            "{rev}: {:?}",
            r.error
        );
    }
    let full = s.call("git_diff", json!({})).structured["diff"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(full.len() > 40, "{full}");
    // Pages of max_bytes are git's diff exactly, each continued by its cursor.
    for (tool, args, max) in [
        ("git_diff", json!({}), 20),
        ("git_show", json!({"revision": "HEAD"}), 10),
    ] {
        let mut whole = args.clone();
        whole["max_bytes"] = json!(1 << 20);
        let want = s.call(tool, whole).ok()["diff"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut got = String::new();
        let mut a = args.clone();
        a["max_bytes"] = json!(max);
        loop {
            let r = s.call(tool, a.clone());
            let sc = r.ok().clone();
            let page = sc["diff"].as_str().unwrap();
            assert!(page.len() <= max, "{tool}: {page:?}");
            got.push_str(page);
            let Some(c) = sc["next_cursor"].as_str() else {
                break;
            };
            assert_eq!(sc["truncated"], true);
            a["cursor"] = json!(c);
        }
        assert_eq!(got, want, "{tool}");
    }
    assert!(full.len() > 40, "{full}");
}

/// Regression (re-check of adversarial report F11): when git's output passed the cap, the
/// reader stopped but still waited for git's stderr to end, while git was blocked writing the
/// rest of its stdout — the call hung until the 60 s git timeout. A repository whose config
/// lists megabytes of filter settings did that to every git tool, and through the relay a
/// reviewer could hold all call slots with it.
#[test]
fn git_output_past_the_cap_ends_the_call_at_once() {
    let t = Tree::new();
    repo(t.path());
    let config = t.path().join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[filter \"big\"]\n\tclean = {}\n",
        "x".repeat(2 << 20)
    ));
    std::fs::write(&config, text).unwrap();
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let r = s.call("git_status", json!({}));
    assert_eq!(r.code(), "invalid_request", "{:?}", r.error);
    assert!(
        r.error["message"]
            .as_str()
            .unwrap()
            .contains("too many filters"),
        "{:?}",
        r.error
    );
}

/// Writes an executable shell script `name` in `dir` that appends its name to `marker` and then
/// runs `then` (e.g. `cat` for a filter, `exec git-upload-pack "$@"` for a transport).
fn spy(dir: &Path, name: &str, marker: &Path, then: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho {name} \"$@\" >> '{}'\n{then}\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

fn assert_no_marker(marker: &Path) {
    assert!(
        !marker.exists(),
        "git ran a program: {}",
        std::fs::read_to_string(marker).unwrap_or_default()
    );
}

/// The control that keeps a test from passing vacuously: plain `git args` in `dir`, as the user
/// would run it with `env`, runs the hostile program (the marker appears); the marker is removed
/// again for the run through the server.
fn assert_git_runs_the_spy(dir: &Path, env: &[(&str, &str)], args: &[&str], marker: &Path) {
    let _ = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("git runs");
    assert!(
        marker.exists(),
        "control: plain git {args:?} should run the hostile program"
    );
    std::fs::remove_file(marker).unwrap();
}

/// A server that answers every HTTP request with `401` and a Basic challenge, so a git fetching
/// from it asks its credential helpers and askpass. Returns its URL prefix.
fn unauthorized_http_server() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    url
}

/// A partial clone (`--filter=blob:none`) at `root/name` of a committed repository at
/// `root/origin` whose index is HEAD's tree but whose work tree and object store have no file
/// contents: diffing it, showing HEAD or reading a mailmap blob needs objects git would fetch
/// lazily from the promisor remote.
fn partial_clone(root: &Path, name: &str) -> std::path::PathBuf {
    let origin = root.join("origin");
    if !origin.exists() {
        std::fs::create_dir_all(&origin).unwrap();
        repo(&origin);
        git(&origin, &["add", "-A"]);
        git(&origin, &["commit", "-q", "-m", "third commit"]);
        git(&origin, &["config", "uploadpack.allowFilter", "true"]);
        git(
            &origin,
            &["config", "uploadpack.allowAnySHA1InWant", "true"],
        );
    }
    let url = format!("file://{}", origin.display());
    git(
        root,
        &[
            "clone",
            "-q",
            "--filter=blob:none",
            "--no-checkout",
            &url,
            name,
        ],
    );
    let ws = root.join(name);
    git(&ws, &["read-tree", "HEAD"]);
    // A log that must read a blob: the mailmap (git-config(1) "mailmap.blob").
    git(&ws, &["config", "mailmap.blob", "HEAD:a.txt"]);
    ws
}

/// Calls every reading git tool and returns the errors; each tool either succeeds or fails.
fn read_everything(s: &mut Server) -> Vec<(&'static str, serde_json::Value)> {
    let mut errors = Vec::new();
    for (tool, args) in [
        ("git_diff", json!({})),
        ("git_show", json!({"revision": "HEAD"})),
        ("git_log", json!({})),
        ("git_status", json!({})),
    ] {
        let r = s.call(tool, args);
        if r.is_error {
            errors.push((tool, r.error.clone()));
        }
    }
    errors
}

/// A failure to read a missing object says it is missing from the partial clone and that
/// nothing is fetched.
fn assert_clear_partial_clone_errors(errors: &[(&str, serde_json::Value)]) {
    for (tool, e) in errors {
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(
            e["code"] == "not_found"
                && msg.contains("missing from this partial clone")
                && msg.contains("never fetches"),
            "{tool}: a clear error names the missing object's cause: {e:?}"
        );
    }
    // The control's own fetch may have brought some objects, but showing HEAD's patch always
    // needs one more that is missing, so the read path was exercised.
    assert!(errors.iter().any(|(t, _)| *t == "git_show"), "{errors:?}");
}

/// Regression (issue 11.1): in a partial clone, `git_diff`/`git_show`/`git_log` fetched a
/// missing object from the promisor remote, running the repository's `remote.<name>.uploadpack`
/// command — any program — under `review`; also when that setting comes from a file the
/// repository's configuration includes (`include.path`, `includeIf "gitdir:"`).
#[test]
fn lazy_fetch_never_runs_the_remotes_upload_pack_even_under_review() {
    let t = Tree::new();
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env = [("HOME", home.to_str().unwrap())];
    let marker = t.path().join("ran");
    let up = spy(
        t.path(),
        "uploadpack",
        &marker,
        "exec git-upload-pack \"$@\"",
    );
    // 1. The repository's own configuration.
    let ws = partial_clone(t.path(), "ws");
    git(&ws, &["config", "remote.origin.uploadpack", &up]);
    assert_git_runs_the_spy(&ws, &env, &["diff"], &marker);
    let mut s = Server::start_with_env(&ws, &["--profile", "review"], &env);
    let errors = read_everything(&mut s);
    assert_no_marker(&marker);
    assert_clear_partial_clone_errors(&errors);
    // The commits are still listed: only the mailmap blob was missing.
    let log = s.call("git_log", json!({}));
    assert_eq!(log.ok()["commits"][0]["subject"], "third commit");
    // 2. A file the repository's configuration includes, plainly and conditionally.
    let hostile = t.path().join("hostile.cfg");
    std::fs::write(
        &hostile,
        format!("[remote \"origin\"]\n\tuploadpack = {up}\n"),
    )
    .unwrap();
    for (name, key) in [
        ("ws-inc", "include.path".to_owned()),
        (
            "ws-if",
            format!("includeIf.gitdir:{}/.path", t.path().display()),
        ),
    ] {
        let ws = partial_clone(t.path(), name);
        git(&ws, &["config", &key, hostile.to_str().unwrap()]);
        assert_git_runs_the_spy(&ws, &env, &["diff"], &marker);
        let mut s = Server::start_with_env(&ws, &["--profile", "review"], &env);
        let errors = read_everything(&mut s);
        assert_no_marker(&marker);
        assert_clear_partial_clone_errors(&errors);
    }
}

/// Regression (issue 11.1): a repository that enables the `ext::` transport for its promisor
/// remote (`protocol.ext.allow`, or `remote.<name>.vcs = ext`) had any command run by a lazy
/// fetch.
#[test]
fn lazy_fetch_never_runs_a_transport_the_repository_enables() {
    let t = Tree::new();
    let marker = t.path().join("ran");
    let env = [("HOME", t.path().to_str().unwrap())];
    let command = format!("sh -c touch% {}", marker.display());
    for (name, url, vcs) in [
        ("ws", format!("ext::{command}"), None),
        ("ws-vcs", command.clone(), Some("ext")),
    ] {
        let ws = partial_clone(t.path(), name);
        git(&ws, &["config", "remote.origin.url", &url]);
        if let Some(vcs) = vcs {
            git(&ws, &["config", "remote.origin.vcs", vcs]);
        }
        git(&ws, &["config", "protocol.ext.allow", "always"]);
        git(&ws, &["config", "protocol.allow", "always"]);
        assert_git_runs_the_spy(&ws, &env, &["diff"], &marker);
        let mut s = Server::start_with_env(&ws, &["--profile", "review"], &env);
        let errors = read_everything(&mut s);
        assert_no_marker(&marker);
        assert_clear_partial_clone_errors(&errors);
    }
}

/// Regression (issue 11.1): a promisor remote over HTTP that asks for credentials ran the
/// repository's credential helper and `core.askPass` (askpass is asked even with terminal
/// prompts off).
#[test]
fn lazy_fetch_never_runs_credential_helpers_or_askpass() {
    let t = Tree::new();
    let marker = t.path().join("ran");
    let env = [("HOME", t.path().to_str().unwrap())];
    let helper = spy(t.path(), "helper", &marker, "exit 0");
    let ws = partial_clone(t.path(), "ws");
    let url = format!("{}/r.git", unauthorized_http_server());
    git(&ws, &["config", "remote.origin.url", &url]);
    git(&ws, &["config", "credential.helper", &format!("!{helper}")]);
    git(&ws, &["config", "core.askPass", &helper]);
    assert_git_runs_the_spy(&ws, &env, &["diff"], &marker);
    let mut s = Server::start_with_env(&ws, &["--profile", "review"], &env);
    let errors = read_everything(&mut s);
    assert_no_marker(&marker);
    assert_clear_partial_clone_errors(&errors);
}

/// Regression (issue 11.1): an ssh promisor remote ran `core.sshCommand` from the user's global
/// or XDG configuration (and `GIT_SSH_COMMAND`/`GIT_SSH` if the server's environment reached
/// git), and a `git://` one ran the repository's `core.gitProxy`.
#[test]
fn lazy_fetch_never_runs_ssh_or_proxy_commands_from_any_configuration_or_environment() {
    let t = Tree::new();
    let marker = t.path().join("ran");
    let ssh = spy(t.path(), "ssh", &marker, "exit 1");
    let prepare = |name: &str, url: &str| {
        let ws = partial_clone(t.path(), name);
        git(&ws, &["config", "remote.origin.url", url]);
        ws
    };
    let ssh_url = "ssh://example.invalid/r.git";
    // 1. ~/.gitconfig.
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        format!("[core]\n\tsshCommand = {ssh}\n[credential]\n\thelper = !{ssh}\n"),
    )
    .unwrap();
    let empty_home = t.path().join("empty-home");
    std::fs::create_dir_all(&empty_home).unwrap();
    let xdg = t.path().join("xdg");
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    std::fs::write(
        xdg.join("git/config"),
        format!("[core]\n\tsshCommand = {ssh}\n"),
    )
    .unwrap();
    let cases = [
        // 1. ~/.gitconfig.
        ("ws1", ssh_url, vec![("HOME", home.to_str().unwrap())]),
        // 2. $XDG_CONFIG_HOME/git/config.
        (
            "ws2",
            ssh_url,
            vec![
                ("HOME", empty_home.to_str().unwrap()),
                ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
            ],
        ),
        // 3. The server's environment.
        (
            "ws3",
            ssh_url,
            vec![
                ("HOME", empty_home.to_str().unwrap()),
                ("GIT_SSH_COMMAND", ssh.as_str()),
                ("GIT_SSH", ssh.as_str()),
            ],
        ),
        // 4. core.gitProxy in the repository's configuration (set below).
        (
            "ws4",
            "git://example.invalid/r.git",
            vec![("HOME", empty_home.to_str().unwrap())],
        ),
    ];
    for (name, url, env) in cases {
        let ws = prepare(name, url);
        if name == "ws4" {
            git(&ws, &["config", "core.gitProxy", &ssh]);
        }
        assert_git_runs_the_spy(&ws, &env, &["diff"], &marker);
        let mut s = Server::start_with_env(&ws, &["--profile", "review"], &env);
        let errors = read_everything(&mut s);
        assert_no_marker(&marker);
        assert_clear_partial_clone_errors(&errors);
    }
}

/// Issue 11.1: a global or XDG configuration (the server's `HOME`), including files it
/// includes and a global attributes file, cannot make any git tool run a program — fsmonitor,
/// pager, editor, askpass, external diff, textconv, filters, hooks (`core.hooksPath`: a commit
/// runs none), credential and ssh helpers, signing — while the commit identity still comes
/// from it.
#[test]
fn global_and_xdg_config_cannot_run_programs() {
    let t = Tree::new();
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    repo(&ws);
    git(&ws, &["config", "--unset", "user.name"]);
    git(&ws, &["config", "--unset", "user.email"]);
    let marker = t.path().join("ran");
    let home = t.path().join("home");
    let hooks = home.join("hooks");
    let xdg = t.path().join("xdg");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    let h = spy(t.path(), "helper", &marker, "cat");
    for hook in [
        "pre-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "post-index-change",
        "reference-transaction",
        "pre-auto-gc",
    ] {
        spy(&hooks, hook, &marker, "exit 0");
    }
    std::fs::write(
        home.join(".gitconfig"),
        format!(
            "[user]\n\tname = Global Name\n\temail = global@example.com\n\
             [core]\n\tfsmonitor = {h}\n\tpager = {h}\n\teditor = {h}\n\taskPass = {h}\n\
             \tsshCommand = {h}\n\thooksPath = {hooks}\n\
             [diff]\n\texternal = {h}\n\tsubmodule = diff\n[diff \"txt\"]\n\ttextconv = {h}\n\
             [filter \"glob\"]\n\tclean = {h}\n\tsmudge = {h}\n\trequired = true\n\
             [credential]\n\thelper = !{h}\n\
             [gpg]\n\tprogram = {h}\n[commit]\n\tgpgSign = true\n[log]\n\tshowSignature = true\n\
             [gc]\n\tauto = 1\n[include]\n\tpath = {inc}\n",
            hooks = hooks.display(),
            inc = home.join("included.cfg").display()
        ),
    )
    .unwrap();
    std::fs::write(
        home.join("included.cfg"),
        format!("[filter \"inc\"]\n\tclean = {h}\n\trequired = true\n"),
    )
    .unwrap();
    std::fs::write(
        xdg.join("git/config"),
        format!("[core]\n\tfsmonitor = {h}\n[filter \"xdg\"]\n\tprocess = {h}\n"),
    )
    .unwrap();
    std::fs::write(
        xdg.join("git/attributes"),
        "a.txt filter=glob diff=txt\nb.txt filter=inc\nnew.txt filter=xdg\n",
    )
    .unwrap();
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
    ];
    assert_git_runs_the_spy(&ws, &env, &["diff"], &marker);
    std::thread::sleep(Duration::from_millis(1100));
    for f in ["a.txt", "b.txt"] {
        let body = std::fs::read(ws.join(f)).unwrap();
        std::fs::write(ws.join(f), body).unwrap();
    }
    let mut s = Server::start_with_env(&ws, &["--profile", "agent"], &env);
    let d = s.call("git_diff", json!({}));
    assert!(
        d.ok()["diff"].as_str().unwrap().contains("+TWO"),
        "{:?}",
        d.structured
    );
    assert!(!s.call("git_diff", json!({"staged": true})).is_error);
    assert!(!s.call("git_status", json!({})).is_error);
    assert!(!s.call("git_show", json!({"revision": "HEAD"})).is_error);
    assert!(!s.call("git_log", json!({"path": "a.txt"})).is_error);
    let c = s.call("git_commit", json!({"message": "no hook runs"}));
    assert!(!c.is_error, "{:?}", c.error);
    assert_no_marker(&marker);
    let author = git(&ws, &["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(author.trim(), "Global Name <global@example.com>");
}

/// Issue 11.1: variables in the server's environment that steer git (config injection, pager,
/// editor, external diff, askpass, exec path, trace files) never reach the git tools.
#[test]
fn the_servers_git_environment_never_reaches_git() {
    let t = Tree::new();
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    repo(&ws);
    let marker = t.path().join("ran");
    let h = spy(t.path(), "helper", &marker, "cat");
    let bad_config = t.path().join("bad.cfg");
    std::fs::write(&bad_config, format!("[core]\n\tfsmonitor = {h}\n")).unwrap();
    let exec_path = t.path().join("exec-path");
    std::fs::create_dir_all(&exec_path).unwrap();
    let trace = t.path().join("trace");
    let params = format!("'core.fsmonitor={h}'");
    assert_git_runs_the_spy(
        &ws,
        &[("GIT_CONFIG_PARAMETERS", params.as_str())],
        &["status"],
        &marker,
    );
    let mut s = Server::start_with_env(
        &ws,
        &["--profile", "agent"],
        &[
            ("HOME", t.path().to_str().unwrap()),
            ("GIT_CONFIG_PARAMETERS", params.as_str()),
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "diff.external"),
            ("GIT_CONFIG_VALUE_0", h.as_str()),
            ("GIT_CONFIG_GLOBAL", bad_config.to_str().unwrap()),
            ("GIT_CONFIG_SYSTEM", bad_config.to_str().unwrap()),
            ("GIT_CONFIG", bad_config.to_str().unwrap()),
            ("GIT_EXTERNAL_DIFF", h.as_str()),
            ("GIT_PAGER", h.as_str()),
            ("PAGER", h.as_str()),
            ("GIT_EDITOR", h.as_str()),
            ("EDITOR", h.as_str()),
            ("VISUAL", h.as_str()),
            ("GIT_ASKPASS", h.as_str()),
            ("SSH_ASKPASS", h.as_str()),
            ("GIT_EXEC_PATH", exec_path.to_str().unwrap()),
            ("GIT_TRACE", trace.to_str().unwrap()),
            ("GIT_TRACE2", trace.to_str().unwrap()),
        ],
    );
    assert!(!s.call("git_status", json!({})).is_error);
    assert!(!s.call("git_diff", json!({})).is_error);
    assert!(!s.call("git_show", json!({"revision": "HEAD"})).is_error);
    assert!(!s.call("git_log", json!({})).is_error);
    assert!(!s.call("git_commit", json!({"message": "env"})).is_error);
    assert_no_marker(&marker);
    assert!(!trace.exists(), "GIT_TRACE reached git");
}

/// Issue 11.1: without an exec mode, files outside `.git` that git reads as configuration for
/// a workspace repository — a home directory inside the workspace (`.gitconfig`,
/// `.config/git/{config,attributes}`), the server's `$XDG_CONFIG_HOME/git` — are refused like
/// writes inside `.git`; with an exec mode they are allowed.
#[test]
fn writes_to_git_configuration_outside_dot_git_need_an_exec_mode() {
    let t = Tree::new();
    let ws = t.path().join("home");
    let xdg = t.path().join("home/dotfiles");
    std::fs::create_dir_all(ws.join(".config/git")).unwrap();
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    std::fs::create_dir_all(ws.join("bob/.config")).unwrap();
    std::fs::write(ws.join(".config/git/attributes"), "x\n").unwrap();
    repo(&ws);
    let env = [
        ("HOME", ws.to_str().unwrap()),
        ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
    ];
    let mut s = Server::start_with_env(&ws, &["--profile", "edit"], &env);
    let hostile = "[core]\n\tfsmonitor = /bin/evil\n";
    for path in [
        ".gitconfig",
        ".config/git/config",
        ".config/git/attributes",
        ".config/git/ignore",
        ".CONFIG/Git/config",
        "dotfiles/git/config",
        "bob/.gitconfig",
        "bob/.config/git/config",
        "project/.gitconfig",
    ] {
        let r = s.call("write_file", json!({"path": path, "content": hostile}));
        assert_eq!(r.code(), "policy_denied", "{path}: {:?}", r.error);
        assert!(
            r.error["message"]
                .as_str()
                .unwrap()
                .contains("git configuration"),
            "{path}: {:?}",
            r.error
        );
    }
    let r = s.call(
        "edit_file",
        json!({"path": ".config/git/attributes", "old_text": "x", "new_text": "* filter=x"}),
    );
    assert_eq!(r.code(), "policy_denied", "{:?}", r.error);
    let patch =
        "*** Begin Patch\n*** Add File: .gitconfig\n+[core]\n+\tpager = /bin/evil\n*** End Patch\n";
    assert_eq!(
        s.call("apply_patch", json!({"patch": patch})).code(),
        "policy_denied"
    );
    let patch = "*** Begin Patch\n*** Update File: a.txt\n*** Move to: .gitconfig\n@@\n-one\n+ONE\n*** End Patch\n";
    assert_eq!(
        s.call("apply_patch", json!({"patch": patch})).code(),
        "policy_denied"
    );
    assert!(!ws.join(".gitconfig").exists());
    assert!(!ws.join(".config/git/config").exists());
    assert!(!xdg.join("git/config").exists());
    // Ordinary files beside them are still writable, and .gitattributes and .gitignore too.
    for path in [
        ".config/other.toml",
        ".gitattributes",
        ".gitignore",
        "git/config",
    ] {
        let r = s.call("write_file", json!({"path": path, "content": "x\n"}));
        assert!(!r.is_error, "{path}: {:?}", r.error);
    }
    let mut s = Server::start_with_env(&ws, &["--profile", "agent"], &env);
    let r = s.call(
        "write_file",
        json!({"path": ".gitconfig", "content": "[user]\n"}),
    );
    assert!(
        !r.is_error,
        "with an exec mode the write is allowed: {:?}",
        r.error
    );
}

/// Regression (issue 11 item 11): `git_show` of an annotated tag printed the tag object's header
/// (tagger name and e-mail, the tag message) into the commit hash field. The tag is peeled to
/// its commit: the result is that commit, and the tag is named beside it, its tagger's e-mail
/// only with `include_email`, like the author's.
#[test]
fn show_peels_an_annotated_tag_to_its_commit_without_the_taggers_email() {
    let t = Tree::new();
    repo(t.path());
    let first = git(t.path(), &["rev-parse", "HEAD~1"]).trim().to_owned();
    Command::new("git")
        .args(["tag", "-a", "v1", "-m", "release one", "HEAD~1"])
        .current_dir(t.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", t.path())
        .env("GIT_COMMITTER_NAME", "Tess Tagger")
        .env("GIT_COMMITTER_EMAIL", "tess@example.org")
        .status()
        .unwrap();
    git(
        t.path(),
        &["tag", "-a", "v1-again", "-m", "tag of a tag", "v1"],
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    for rev in ["v1", "v1-again", "refs/tags/v1"] {
        let r = s.call("git_show", json!({"revision": rev}));
        let out = r.ok().clone();
        assert_eq!(out["commit"], first, "{rev}");
        assert_eq!(out["author"], "Ada Lovelace");
        assert_eq!(out["message"], "first commit");
        assert!(out["diff"].as_str().unwrap().contains("+one\n"), "{out}");
        assert!(
            !r.body().contains("tess@example.org") && !out.to_string().contains("tess@example.org"),
            "{rev}: {out}"
        );
        assert!(r.summary().contains(&first), "{}", r.summary());
    }
    let out = s.call("git_show", json!({"revision": "v1"})).ok().clone();
    assert_eq!(out["tag"]["name"], "v1");
    assert_eq!(out["tag"]["tagger"], "Tess Tagger");
    assert_eq!(out["tag"]["message"], "release one");
    assert_eq!(out["tag"].get("email"), None);
    let out = s
        .call("git_show", json!({"revision": "v1", "include_email": true}))
        .ok()
        .clone();
    assert_eq!(out["tag"]["email"], "tess@example.org");
    assert_eq!(out["email"], "ada@example.com");
    // A lightweight tag and a plain revision name no tag.
    git(t.path(), &["tag", "light", "HEAD~1"]);
    let out = s
        .call("git_show", json!({"revision": "light"}))
        .ok()
        .clone();
    assert_eq!(out["commit"], first);
    assert_eq!(out.get("tag"), None);
}

/// Regression (issue 11 item 11): the `.git` guard compared names exactly (ignoring ASCII case),
/// so `.git.`, `.git ` and the 8.3 short name `GIT~1` passed — names that Windows, SMB shares and
/// NTFS fold to `.git` (trailing dots and spaces dropped), and HFS+ folds `.g\u{200c}it` (an
/// ignorable code point) to it. The guard refuses the names git itself refuses to check out
/// (`core.protectNTFS`, `core.protectHFS`) on every file system, since it cannot know whether the
/// one below folds them: on ext4 `.git.` is another name, and refusing it costs nothing. The same
/// folding applies to `.gitconfig` and `.config/git`.
#[test]
fn the_dot_git_guard_refuses_names_that_folding_file_systems_make_dot_git() {
    let t = Tree::new();
    repo(t.path());
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    for path in [
        ".git./config",
        ".git /config",
        ".GIT. . /hooks/pre-commit",
        "GIT~1/config",
        "sub/git~2/config",
        ".g\u{200c}it/config",
        "\u{feff}.git/config",
        ".gitconfig.",
        ".gitconfig ",
        "GITCON~1",
        ".config./git/config",
        ".config/git./config",
    ] {
        let r = s.call("write_file", json!({"path": path, "content": "[core]\n"}));
        assert_eq!(r.code(), "policy_denied", "{path:?}: {:?}", r.error);
        let first = path.split('/').next().unwrap();
        assert!(!t.path().join(first).exists(), "{path:?} was created");
    }
    let patch =
        "*** Begin Patch\n*** Add File: .git./hooks/post-checkout\n+#!/bin/sh\n*** End Patch\n";
    assert_eq!(
        s.call("apply_patch", json!({"patch": patch})).code(),
        "policy_denied"
    );
    // Names that only begin like them stay writable.
    for path in [
        ".git.bak/x",
        ".gitx/config",
        "git~/x",
        "GIT~1x/y",
        ".github/workflows/ci.yml",
    ] {
        let r = s.call("write_file", json!({"path": path, "content": "x\n"}));
        assert!(!r.is_error, "{path:?}: {:?}", r.error);
    }
}
