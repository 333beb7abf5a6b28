//! write_file and edit_file: atomicity, preconditions, line endings, byte preservation.

use serde_json::json;

use crate::util::{Server, Tree};

fn sha(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn growing_edits_keep_every_byte_after_the_edited_spans() {
    let t = Tree::new();
    let mut original = String::new();
    let mut i = 0;
    while original.len() < 150_000 {
        original.push_str(&format!(
            "line {i:05}: the quick brown fox jumps over the lazy dog\n"
        ));
        i += 1;
    }
    original.push_str("THE LAST LINE, WITHOUT A NEWLINE");
    t.write("big.txt", &original);
    let mut s = Server::start(t.path(), &[]);
    let mut expected = original.clone();
    for k in 0..25 {
        let line = format!("line {:05}:", 100 + k * 97);
        let grown = format!("{line} EDITED {}", "+".repeat(500 + k * 100));
        let r = s.call(
            "edit_file",
            json!({"path": "big.txt", "old_text": line, "new_text": grown}),
        );
        assert_eq!(r.ok()["replacements"], 1);
        expected = expected.replacen(&line, &grown, 1);
        let on_disk = String::from_utf8(t.read("big.txt")).unwrap();
        assert_eq!(on_disk.len(), expected.len(), "after edit {k}");
        assert!(
            on_disk == expected,
            "after edit {k} the file differs from the expected bytes"
        );
        assert!(on_disk.ends_with("\nTHE LAST LINE, WITHOUT A NEWLINE"));
    }
    assert!(expected.len() > original.len() + 25 * 500);
}

#[test]
fn crlf_mixed_and_bom_round_trip_byte_exact() {
    let t = Tree::new();
    let crlf = b"\xEF\xBB\xBFfn main() {\r\n    old();\r\n    keep();\r\n}\r\n".to_vec();
    t.write("crlf.rs", &crlf);
    let mixed = b"a\nb\r\nc\nd\r\ne".to_vec();
    t.write("mixed.txt", &mixed);
    let mut s = Server::start(t.path(), &[]);
    // LF-written old_text and new_text against a CRLF file with a BOM.
    let r = s.call(
        "edit_file",
        json!({"path": "crlf.rs", "old_text": "    old();\n    keep();\n", "new_text": "    new();\n    also();\n    keep();\n"}),
    );
    assert_eq!(r.ok()["replacements"], 1);
    assert_eq!(
        t.read("crlf.rs"),
        b"\xEF\xBB\xBFfn main() {\r\n    new();\r\n    also();\r\n    keep();\r\n}\r\n"
    );
    let diff = r.ok()["diff"].as_str().unwrap();
    assert!(
        diff.contains("-    old();") && diff.contains("+    new();"),
        "{diff}"
    );
    // Mixed endings: only the edited span changes.
    let r = s.call(
        "edit_file",
        json!({"path": "mixed.txt", "old_text": "c\nd", "new_text": "C\nD"}),
    );
    assert!(!r.is_error);
    assert_eq!(t.read("mixed.txt"), b"a\nb\r\nC\nD\r\ne");
    // A no-op-sized edit elsewhere leaves all other bytes exactly.
    let r = s.call(
        "edit_file",
        json!({"path": "mixed.txt", "old_text": "e", "new_text": "E"}),
    );
    assert!(!r.is_error);
    assert_eq!(t.read("mixed.txt"), b"a\nb\r\nC\nD\r\nE");
}

#[test]
fn ambiguous_and_missing_old_text_are_conflicts_with_lines() {
    let t = Tree::new();
    t.write("f.txt", "x = 1\ny = 2\nx = 1\n");
    let mut s = Server::start(t.path(), &[]);
    let r = s.call(
        "edit_file",
        json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 3"}),
    );
    assert_eq!(r.code(), "conflict");
    assert_eq!(r.error["match_count"], 2);
    assert_eq!(r.error["match_lines"], json!([1, 3]));
    let r = s.call(
        "edit_file",
        json!({"path": "f.txt", "old_text": "z = 9", "new_text": "z"}),
    );
    assert_eq!(r.code(), "conflict");
    assert_eq!(r.error["match_count"], 0);
    assert_eq!(t.read("f.txt"), b"x = 1\ny = 2\nx = 1\n");
    let r = s.call(
        "edit_file",
        json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 3", "replace_all": true}),
    );
    assert_eq!(r.ok()["replacements"], 2);
    assert_eq!(t.read("f.txt"), b"x = 3\ny = 2\nx = 3\n");
}

#[test]
fn expected_sha256_and_create_only_conflicts_change_nothing() {
    let t = Tree::new();
    let p = t.write("f.txt", "original\n");
    let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
    let mut s = Server::start(t.path(), &[]);
    let wrong = sha(b"something else");
    let r = s.call(
        "write_file",
        json!({"path": "f.txt", "content": "new\n", "expected_sha256": wrong}),
    );
    assert_eq!(r.code(), "conflict");
    let r = s.call(
        "edit_file",
        json!({"path": "f.txt", "old_text": "original", "new_text": "x", "expected_sha256": wrong}),
    );
    assert_eq!(r.code(), "conflict");
    let r = s.call(
        "write_file",
        json!({"path": "f.txt", "content": "new\n", "create_only": true}),
    );
    assert_eq!(r.code(), "conflict");
    assert_eq!(t.read("f.txt"), b"original\n");
    assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), mtime);
    assert_eq!(
        std::fs::read_dir(t.path()).unwrap().count(),
        1,
        "no temp files left behind"
    );
    // The right hash succeeds and returns the new one.
    let r = s.call(
        "write_file",
        json!({"path": "f.txt", "content": "new\n", "expected_sha256": sha(b"original\n")}),
    );
    assert_eq!(r.ok()["sha256"], sha(b"new\n"));
    assert_eq!(r.ok()["created"], false);
    let r = s.call("edit_file", json!({"path": "f.txt", "old_text": "new", "new_text": "newer", "expected_sha256": sha(b"new\n")}));
    assert_eq!(r.ok()["sha256"], sha(b"newer\n"));
    assert_eq!(r.ok()["previous_sha256"], sha(b"new\n"));
}

#[test]
fn write_file_creates_dirs_keeps_mode_and_dry_run_writes_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tree::new();
    let p = t.write("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = Server::start(t.path(), &[]);
    let r = s.call(
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    );
    assert_eq!(r.ok()["size_bytes"], 18);
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o755
    );
    let r = s.call(
        "write_file",
        json!({"path": "a/b/c.txt", "content": "deep", "create_only": true}),
    );
    assert_eq!(r.ok()["created"], true);
    assert_eq!(t.read("a/b/c.txt"), b"deep");
    let r = s.call(
        "write_file",
        json!({"path": "x/y.txt", "content": "z", "create_dirs": false}),
    );
    assert_eq!(r.code(), "not_found");
    let r = s.call(
        "edit_file",
        json!({"path": "a/b/c.txt", "old_text": "deep", "new_text": "shallow", "dry_run": true}),
    );
    assert_eq!(r.ok()["dry_run"], true);
    assert!(r.ok()["diff"].as_str().unwrap().contains("+shallow"));
    assert_eq!(t.read("a/b/c.txt"), b"deep");
}

/// The most calls a server runs at once (`protocol::limits::CONCURRENT_TOOL_CALLS`); one more
/// gets `limit_exceeded`, so each burst below is exactly this many calls.
const BURST: usize = 16;

#[test]
fn concurrent_edits_of_one_file_are_all_kept() {
    // Issue 11 item 3: concurrent edit_file calls on one file reported success while an edit
    // committed between their read and their rename was overwritten.
    const ROUNDS: usize = 4;
    let markers = BURST * ROUNDS;
    let t = Tree::new();
    let body: String = (0..markers).map(|i| format!("m{i}\n")).collect();
    t.write("f.txt", &body);
    let mut s = Server::start(t.path(), &[]);
    for round in 0..ROUNDS {
        let calls = (round * BURST..(round + 1) * BURST)
            .map(|i| json!({"path": "f.txt", "old_text": format!("m{i}\n"), "new_text": format!("M{i}\n")}))
            .collect();
        let replies = s.call_all("edit_file", calls);
        let on_disk = String::from_utf8(t.read("f.txt")).unwrap();
        let lines: Vec<&str> = on_disk.lines().collect();
        let mut lost = Vec::new();
        let mut refused = Vec::new();
        for (k, r) in replies.iter().enumerate() {
            let i = round * BURST + k;
            if r.is_error {
                assert_eq!(r.code(), "conflict", "call {i}: {}", r.error);
                refused.push(i);
                assert_eq!(lines[i], format!("m{i}"), "a refused edit changed nothing");
            } else if lines[i] != format!("M{i}") {
                lost.push(i);
            }
        }
        assert!(
            lost.is_empty(),
            "round {round}: edits {lost:?} reported success but are not in the file"
        );
        assert!(
            refused.is_empty(),
            "round {round}: edits {refused:?} of distinct lines were refused as conflicts"
        );
    }
    let expected: String = (0..markers).map(|i| format!("M{i}\n")).collect();
    assert_eq!(String::from_utf8(t.read("f.txt")).unwrap(), expected);
}

/// Two servers on one workspace (two hosts open on one repository, or a stdio server beside the
/// daemon of `up`) each append lines with `edit_file` against the file's current content: every
/// edit either server reports successful is in the file. Each server serialized its own writers
/// only, so an edit of the other committed between one's SHA-256 check and its rename was lost.
#[test]
fn two_servers_appending_to_one_file_lose_no_reported_edit() {
    const ROUNDS: usize = 12;
    let t = Tree::new();
    t.write("log.txt", "END\n");
    let servers = ["a", "b"].map(|tag| {
        let s = Server::start(t.path(), &["--profile", "edit"]);
        (tag, s)
    });
    let start = std::sync::Arc::new(std::sync::Barrier::new(servers.len()));
    let workers: Vec<_> = servers
        .into_iter()
        .map(|(tag, mut s)| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut kept = Vec::new();
                let mut refused = 0;
                for round in 0..ROUNDS {
                    let lines: Vec<String> =
                        (0..BURST).map(|k| format!("{tag}-{round}-{k}")).collect();
                    let calls = lines
                        .iter()
                        .map(|l| json!({"path": "log.txt", "old_text": "END\n", "new_text": format!("{l}\nEND\n")}))
                        .collect();
                    for (line, r) in lines.into_iter().zip(s.call_all("edit_file", calls)) {
                        if r.is_error {
                            assert_eq!(r.code(), "conflict", "{line}: {}", r.error);
                            refused += 1;
                        } else {
                            kept.push(line);
                        }
                    }
                }
                (kept, refused)
            })
        })
        .collect();
    let results: Vec<(Vec<String>, usize)> =
        workers.into_iter().map(|w| w.join().unwrap()).collect();
    let on_disk = String::from_utf8(t.read("log.txt")).unwrap();
    let in_file: std::collections::HashSet<&str> = on_disk.lines().collect();
    let reported: Vec<&String> = results.iter().flat_map(|(kept, _)| kept).collect();
    let lost: Vec<&&String> = reported
        .iter()
        .filter(|l| !in_file.contains(l.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} edits reported successful are not in the file: {lost:?}",
        lost.len(),
        reported.len()
    );
    let refused: usize = results.iter().map(|(_, r)| r).sum();
    assert_eq!(
        refused, 0,
        "appends against the current content were refused as conflicts"
    );
    assert_eq!(on_disk.lines().count(), reported.len() + 1, "{on_disk}");
}

/// The lock another process holds is waited for a bounded time, then the write is refused as a
/// retryable conflict that changed nothing; a holder that dies releases it (the kernel drops a
/// `flock` with its process), and the lock file is gone after the next write.
#[test]
fn a_lock_held_by_another_process_is_waited_for_boundedly_and_a_dead_holder_releases_it() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let t = Tree::new();
    t.write("f.txt", "before\n");
    let runtime = tempfile::tempdir().unwrap();
    let locks = runtime.path().join("machine-mcp/locks");
    std::fs::create_dir_all(&locks).unwrap();
    let real = std::fs::canonicalize(t.path()).unwrap().join("f.txt");
    let lock = locks.join(format!(
        "{}.lock",
        sha(std::os::unix::ffi::OsStrExt::as_bytes(real.as_os_str()))
    ));
    // The holder is one process (the shell becomes `sleep` holding the locked descriptor), so
    // killing it is the holder dying.
    let mut holder = Command::new("sh")
        .args(["-c", r#"exec 9>"$1" && flock 9 && exec sleep 600"#, "sh"])
        .arg(&lock)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while Command::new("flock")
        .args(["-n".as_ref(), lock.as_os_str(), "true".as_ref()])
        .status()
        .unwrap()
        .success()
    {
        assert!(
            Instant::now() < end,
            "flock did not take {}",
            lock.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let runtime_dir = runtime.path().to_str().unwrap();
    let mut s = Server::start_with_env(
        t.path(),
        &["--profile", "edit"],
        &[("XDG_RUNTIME_DIR", runtime_dir)],
    );
    let r = s.call("write_file", json!({"path": "f.txt", "content": "after\n"}));
    assert_eq!(r.code(), "conflict", "{}", r.error);
    assert_eq!(r.error["retryable"], true, "{}", r.error);
    assert_eq!(r.error["path"], "f.txt", "{}", r.error);
    assert_eq!(t.read("f.txt"), b"before\n", "nothing was changed");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let r = s.call(
        "edit_file",
        json!({"path": "f.txt", "old_text": "before", "new_text": "after"}),
    );
    r.ok();
    assert_eq!(t.read("f.txt"), b"after\n");
    assert_eq!(
        std::fs::read_dir(&locks).unwrap().count(),
        0,
        "the lock file a dead holder left is removed by the next writer"
    );
}

#[test]
fn racing_writers_with_one_expected_sha256_exactly_one_wins() {
    // Issue 11 item 3: the expected_sha256 check and the rename were two steps, so several
    // writers holding the same hash could all succeed, each overwriting the last.
    const ROUNDS: usize = 8;
    let t = Tree::new();
    t.write("f.txt", "round 0\n");
    let mut s = Server::start(t.path(), &[]);
    for round in 0..ROUNDS {
        let current = t.read("f.txt");
        let expected = sha(&current);
        let tool = if round % 2 == 0 {
            "write_file"
        } else {
            "edit_file"
        };
        let calls = (0..BURST)
            .map(|k| {
                let content = format!("round {} writer {k}\n", round + 1);
                if tool == "write_file" {
                    json!({"path": "f.txt", "content": content, "expected_sha256": expected})
                } else {
                    json!({"path": "f.txt", "old_text": String::from_utf8_lossy(&current),
                           "new_text": content, "expected_sha256": expected})
                }
            })
            .collect();
        let replies = s.call_all(tool, calls);
        let winners: Vec<usize> = (0..BURST).filter(|&k| !replies[k].is_error).collect();
        for r in replies.iter().filter(|r| r.is_error) {
            assert_eq!(r.code(), "conflict", "{tool}: {}", r.error);
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round} ({tool}): writers {winners:?} all reported success with one expected_sha256"
        );
        let k = winners[0];
        assert_eq!(
            t.read("f.txt"),
            format!("round {} writer {k}\n", round + 1).as_bytes(),
            "the file holds the winner's content"
        );
        assert_eq!(replies[k].ok()["sha256"], sha(&t.read("f.txt")));
    }
}

/// Every line of a unified diff ends in `\n` and starts with a hunk header, a file header, a
/// context/removed/added prefix or the `\ No newline` marker.
fn assert_well_formed_diff(diff: &str) {
    assert!(diff.ends_with('\n'), "{diff:?}");
    for line in diff.split_inclusive('\n') {
        assert!(
            line.starts_with("--- ")
                || line.starts_with("+++ ")
                || line.starts_with("@@ ")
                || line.starts_with("\\ ")
                || line.starts_with([' ', '-', '+']),
            "{line:?} in {diff:?}"
        );
        assert!(
            !line.trim_end_matches(['\r', '\n']).contains('\r'),
            "a CR inside a diff line: {line:?} in {diff:?}"
        );
    }
}

/// Regression (issue 11 item 11): the diff of a file with old Mac line endings (`\r` alone) ran
/// its lines together (`-b\r+B\r c\r`): `similar` treats a lone CR as a line end and wrote no
/// `\n` after it, so for any reader that splits lines at `\n` the hunk was one malformed line.
/// Each such line now ends its diff line with `\r\n`.
#[test]
fn diffs_of_lone_cr_lines_are_well_formed() {
    let t = Tree::new();
    t.write("mac.txt", "a\rb\rc\r");
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    let out = s
        .call(
            "edit_file",
            json!({"path": "mac.txt", "old_text": "b", "new_text": "B"}),
        )
        .ok()
        .clone();
    let diff = out["diff"].as_str().unwrap();
    assert_well_formed_diff(diff);
    assert!(diff.contains("\n a\r\n-b\r\n+B\r\n c\r\n"), "{diff:?}");
    assert_eq!(t.read("mac.txt"), b"a\rB\rc\r");
    // A last line without any break still gets the marker.
    t.write("open.txt", "a\rb");
    let out = s
        .call(
            "edit_file",
            json!({"path": "open.txt", "old_text": "b", "new_text": "B"}),
        )
        .ok()
        .clone();
    let diff = out["diff"].as_str().unwrap();
    assert_well_formed_diff(diff);
    assert!(
        diff.ends_with("+B\n\\ No newline at end of file\n"),
        "{diff:?}"
    );
    let patch = "*** Begin Patch\n*** Delete File: mac.txt\n*** End Patch\n";
    let out = s.call("apply_patch", json!({"patch": patch})).ok().clone();
    assert_well_formed_diff(out["diff"].as_str().unwrap());
}
