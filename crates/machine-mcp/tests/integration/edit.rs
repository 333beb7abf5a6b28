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
