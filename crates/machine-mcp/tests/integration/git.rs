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
fn show_refuses_non_commits_and_cut_diffs_say_where_they_were_cut() {
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
    let cut = s.call("git_diff", json!({"max_bytes": 20}));
    let text = cut.structured["diff"].as_str().unwrap();
    assert_eq!(cut.structured["truncated"], true);
    assert!(text.starts_with(&full[..20]), "{text}");
    assert!(
        text.ends_with("... diff truncated at 20 bytes (max_bytes)\n"),
        "{text}"
    );
    let cut = s.call("git_show", json!({"revision": "HEAD", "max_bytes": 10}));
    let text = cut.structured["diff"].as_str().unwrap();
    assert!(
        text.ends_with("... diff truncated at 10 bytes (max_bytes)\n"),
        "{text}"
    );
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
