//! apply_patch: all-or-nothing application, errors that name file and hunk, line endings.

use serde_json::json;

use crate::util::{Server, Tree};

#[test]
fn a_patch_whose_third_file_fails_leaves_the_first_two_untouched() {
    let t = Tree::new();
    t.write("one.txt", "alpha\nbeta\n");
    t.write("two.txt", "gamma\n");
    t.write("three.txt", "delta\nepsilon\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let patch = "*** Begin Patch\n\
                 *** Update File: one.txt\n@@\n alpha\n-beta\n+BETA\n\
                 *** Add File: new/four.txt\n+four\n\
                 *** Update File: three.txt\n@@\n delta\n-epsilon\n+EPSILON\n@@\n-no such line\n+x\n\
                 *** End Patch";
    let r = s.call("apply_patch", json!({"patch": patch}));
    assert_eq!(r.code(), "conflict");
    let msg = r.error["message"].as_str().unwrap();
    assert!(msg.contains("three.txt") && msg.contains("hunk 2"), "{msg}");
    assert_eq!(r.error["path"], "three.txt");
    assert_eq!(r.error["hunk"], 2);
    assert_eq!(t.read("one.txt"), b"alpha\nbeta\n");
    assert!(!t.path().join("new").exists());
    assert_eq!(t.read("three.txt"), b"delta\nepsilon\n");
}

#[test]
fn a_valid_patch_applies_every_operation() {
    let t = Tree::new();
    t.write("src/a.rs", "fn a() {\r\n    1\r\n}\r\n");
    t.write("old/name.txt", "keep\nchange\n");
    t.write("gone.txt", "bye\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let patch = "*** Begin Patch\n\
                 *** Update File: src/a.rs\n@@ fn a() {\n-    1\n+    2\n+    3\n\
                 *** Update File: old/name.txt\n*** Move to: new/name.txt\n@@\n keep\n-change\n+changed\n\
                 *** Delete File: gone.txt\n\
                 *** Add File: docs/readme.md\n+# Title\n+\n+text\n\
                 *** End Patch\n";
    let r = s.call("apply_patch", json!({"patch": patch}));
    let out = r.ok();
    let actions: Vec<&str> = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["update", "move", "delete", "add"]);
    assert_eq!(out["files"][1]["moved_to"], "new/name.txt");
    assert_eq!(t.read("src/a.rs"), b"fn a() {\r\n    2\r\n    3\r\n}\r\n");
    assert_eq!(t.read("new/name.txt"), b"keep\nchanged\n");
    assert!(!t.path().join("old/name.txt").exists());
    assert!(!t.path().join("gone.txt").exists());
    assert_eq!(t.read("docs/readme.md"), b"# Title\n\ntext\n");
    assert!(
        out["diff"]
            .as_str()
            .unwrap()
            .contains("+++ b/docs/readme.md")
    );
}

#[test]
fn dry_run_and_syntax_errors_write_nothing() {
    let t = Tree::new();
    t.write("f.txt", "a\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Update File: f.txt\n@@\n-a\n+b\n*** End Patch", "dry_run": true}),
    );
    assert_eq!(r.ok()["dry_run"], true);
    assert!(r.ok()["diff"].as_str().unwrap().contains("+b"));
    assert_eq!(t.read("f.txt"), b"a\n");
    let r = s.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Frobnicate: f.txt\n*** End Patch"}),
    );
    assert_eq!(r.code(), "invalid_request");
    assert_eq!(r.error["line"], 2);
    let r = s.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: f.txt\n+x\n*** End Patch"}),
    );
    assert_eq!(r.code(), "conflict", "adding an existing file");
    assert_eq!(t.read("f.txt"), b"a\n");
}

#[test]
fn updated_files_keep_their_bom_each_line_ending_and_a_missing_final_newline() {
    let t = Tree::new();
    t.write("mixed.txt", "\u{feff}one\r\ntwo\nthree\r\nlast");
    t.write("crlf.txt", "a\r\nb\r\nc");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let patch = "*** Begin Patch\n\
                 *** Update File: mixed.txt\n@@\n one\n-two\n+TWO\n three\n-last\n+LAST\n+more\n\
                 *** Update File: crlf.txt\n@@\n b\n-c\n+C\n\
                 *** End Patch";
    let r = s.call("apply_patch", json!({"patch": patch}));
    r.ok();
    assert_eq!(
        t.read("mixed.txt"),
        "\u{feff}one\r\nTWO\nthree\r\nLAST\r\nmore".as_bytes()
    );
    assert_eq!(t.read("crlf.txt"), b"a\r\nb\r\nC");
}

#[test]
fn concurrent_patches_over_two_files_in_opposite_orders_all_apply() {
    // Issue 11 item 3: every patch that reports success is in both files; the per-file locks are
    // taken in path order, so patches naming the files in opposite orders cannot deadlock.
    const CALLS: usize = 16; // protocol::limits::CONCURRENT_TOOL_CALLS
    let t = Tree::new();
    t.write(
        "a.txt",
        (0..CALLS).map(|i| format!("a{i}\n")).collect::<String>(),
    );
    t.write(
        "b.txt",
        (0..CALLS).map(|i| format!("b{i}\n")).collect::<String>(),
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let calls = (0..CALLS)
        .map(|i| {
            let a = format!("*** Update File: a.txt\n@@\n-a{i}\n+A{i}\n");
            let b = format!("*** Update File: b.txt\n@@\n-b{i}\n+B{i}\n");
            let (first, second) = if i % 2 == 0 { (a, b) } else { (b, a) };
            json!({"patch": format!("*** Begin Patch\n{first}{second}*** End Patch")})
        })
        .collect();
    let replies = s.call_all("apply_patch", calls);
    let a = String::from_utf8(t.read("a.txt")).unwrap();
    let b = String::from_utf8(t.read("b.txt")).unwrap();
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    for (i, r) in replies.iter().enumerate() {
        if r.is_error {
            assert_eq!(r.code(), "conflict", "patch {i}: {}", r.error);
            assert_eq!((a[i], b[i]), (&*format!("a{i}"), &*format!("b{i}")));
        } else {
            assert_eq!(
                (a[i], b[i]),
                (&*format!("A{i}"), &*format!("B{i}")),
                "patch {i} reported success but is not in both files"
            );
        }
    }
    let refused: Vec<usize> = (0..CALLS).filter(|&i| replies[i].is_error).collect();
    assert!(
        refused.is_empty(),
        "patches {refused:?} of distinct lines were refused as conflicts"
    );
}

/// Regression (fresh tester of issue 14): a patch's diff over the cap was cut twice, so its note
/// gave the size of the first cut (40,041 bytes for a 3.3 MB diff), and the summary line did not
/// say the diff was cut.
#[test]
fn a_cut_diff_names_its_real_size_in_the_summary() {
    let ws = Tree::new();
    let mut s = Server::start(ws.path(), &["--profile", "edit"]);
    let added: String = (0..100_000).map(|i| format!("+line {i}\n")).collect();
    let r = s.call(
        "apply_patch",
        json!({"dry_run": true, "patch": format!("*** Begin Patch\n*** Add File: big.txt\n{added}*** End Patch")}),
    );
    let diff = r.ok()["diff"].as_str().unwrap().to_owned();
    let total: usize = diff
        .rsplit_once("... diff truncated (")
        .and_then(|(_, t)| t.strip_suffix(" bytes total)\n"))
        .and_then(|n| n.parse().ok())
        .expect("a cut diff says so");
    // The whole diff: 100,000 lines of "+line N\n" under a two-line header and a hunk header.
    assert!(total > 1_000_000, "{total}");
    assert!(
        r.summary()
            .contains(&format!("cut to its first 40000 of {total} bytes")),
        "{}",
        r.summary()
    );
}

/// A file whose lines end with a lone CR (old Mac files) is patched as `edit_file` edits it:
/// one line model for both tools (a line ends at LF, CRLF or a lone CR, as their diffs show
/// it), each line keeping its own ending. `apply_patch` read the whole file as one line and
/// found no hunk.
#[test]
fn a_file_with_lone_cr_line_endings_is_patched_as_edit_file_edits_it() {
    let t = Tree::new();
    t.write("mac.txt", "one\rtwo\rthree\r");
    t.write("mac2.txt", "one\rtwo\rthree\r");
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    let patch = "*** Begin Patch\n*** Update File: mac.txt\n@@\n one\n-two\n+TWO\n+2\n three\n*** End Patch\n";
    let r = s.call("apply_patch", json!({"patch": patch}));
    let diff = r.ok()["diff"].as_str().unwrap().to_owned();
    assert_eq!(t.read("mac.txt"), b"one\rTWO\r2\rthree\r");
    assert!(diff.contains("-two\r\n+TWO\r\n+2\r\n"), "{diff:?}");
    let r = s.call(
        "edit_file",
        json!({"path": "mac2.txt", "old_text": "one\ntwo\n", "new_text": "one\nTWO\n2\n"}),
    );
    assert_eq!(r.ok()["first_line"], 1);
    assert_eq!(t.read("mac2.txt"), t.read("mac.txt"), "both tools agree");
}
