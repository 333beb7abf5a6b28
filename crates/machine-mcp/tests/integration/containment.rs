//! Path confinement under `--profile agent`, and the same reads under `full`.

use std::os::unix::fs::symlink;

use serde_json::{Value, json};

use crate::util::{Server, Tree};

/// `<tmp>/ws` (the workspace) beside `<tmp>/ws-secret` (a sibling whose name has `ws` as prefix)
/// and `<tmp>/outside`.
struct Layout {
    tmp: Tree,
}

impl Layout {
    fn new() -> Self {
        let tmp = Tree::new();
        tmp.write("ws/inside.txt", "inside\n");
        tmp.write("ws-secret/secret.txt", "secret in sibling\n");
        tmp.write("outside/secret.txt", "secret outside\n");
        tmp.write("outside/img.png", b"\x89PNG\r\n\x1a\nxxxx");
        let ws = tmp.path().join("ws");
        symlink(tmp.path().join("outside/secret.txt"), ws.join("file-link")).unwrap();
        symlink(tmp.path().join("outside"), ws.join("dir-link")).unwrap();
        Layout { tmp }
    }

    fn ws(&self) -> std::path::PathBuf {
        self.tmp.path().join("ws")
    }

    fn outside_entries(&self) -> Vec<String> {
        let mut v: Vec<String> = walk(&self.tmp.path().join("outside"))
            .into_iter()
            .chain(walk(&self.tmp.path().join("ws-secret")))
            .collect();
        v.sort();
        v
    }
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        out.push(e.path().to_string_lossy().into_owned());
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

const ESCAPES: [&str; 6] = [
    "file-link",
    "dir-link/secret.txt",
    "../outside/secret.txt",
    "../ws-secret/secret.txt",
    "./sub/../../outside/secret.txt",
    "/etc/hostname",
];

#[test]
fn agent_denies_every_escape_with_path_boundary_and_touches_nothing_outside() {
    let l = Layout::new();
    let before = l.outside_entries();
    let mut s = Server::start(&l.ws(), &["--profile", "agent"]);
    let abs_sibling = l.tmp.path().join("ws-secret/secret.txt");
    let mut reads: Vec<String> = ESCAPES.iter().map(|s| s.to_string()).collect();
    reads.push(abs_sibling.to_string_lossy().into_owned());
    for p in &reads {
        let r = s.call("read_file", json!({"path": p}));
        assert_eq!(r.code(), "path_boundary", "read_file {p}");
        let r = s.call("view_image", json!({"path": p}));
        assert_eq!(r.code(), "path_boundary", "view_image {p}");
        let r = s.call(
            "edit_file",
            json!({"path": p, "old_text": "secret", "new_text": "pwned"}),
        );
        assert_eq!(r.code(), "path_boundary", "edit_file {p}");
        let r = s.call("write_file", json!({"path": p, "content": "pwned"}));
        assert_eq!(r.code(), "path_boundary", "write_file {p}");
    }
    for p in ["dir-link", "..", "../ws-secret", "/"] {
        assert_eq!(
            s.call("list_dir", json!({"path": p})).code(),
            "path_boundary",
            "list_dir {p}"
        );
        assert_eq!(
            s.call("list_files", json!({"path": p})).code(),
            "path_boundary",
            "list_files {p}"
        );
        assert_eq!(
            s.call("search_text", json!({"pattern": "secret", "path": p}))
                .code(),
            "path_boundary",
            "search {p}"
        );
    }
    // New files under a symlinked directory that points outside.
    let r = s.call(
        "write_file",
        json!({"path": "dir-link/new.txt", "content": "x"}),
    );
    assert_eq!(r.code(), "path_boundary");
    let r = s.call(
        "write_file",
        json!({"path": "dir-link/deep/new.txt", "content": "x"}),
    );
    assert_eq!(r.code(), "path_boundary");
    let r = s.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: dir-link/p.txt\n+x\n*** End Patch"}),
    );
    assert_eq!(r.code(), "path_boundary");
    // A move target outside the workspace.
    let r = s.call("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: inside.txt\n*** Move to: ../outside/moved.txt\n@@\n-inside\n+moved\n*** End Patch"}));
    assert_eq!(r.code(), "path_boundary");
    let r = s.call("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: inside.txt\n*** Move to: dir-link/moved.txt\n@@\n-inside\n+moved\n*** End Patch"}));
    assert_eq!(r.code(), "path_boundary");
    let r = s.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Delete File: ../outside/secret.txt\n*** End Patch"}),
    );
    assert_eq!(r.code(), "path_boundary");
    // Search inside the workspace does not follow the symlinks out.
    let out = s
        .call("search_text", json!({"pattern": "secret"}))
        .ok()
        .clone();
    assert_eq!(out["matches"], json!([]));
    let out = s.call("list_files", json!({})).ok().clone();
    assert!(
        !out["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("dir-link/"))
    );
    // Nothing outside was created, changed or removed.
    assert_eq!(l.outside_entries(), before);
    assert_eq!(
        std::fs::read(l.tmp.path().join("outside/secret.txt")).unwrap(),
        b"secret outside\n"
    );
    assert_eq!(
        std::fs::read(l.tmp.path().join("ws-secret/secret.txt")).unwrap(),
        b"secret in sibling\n"
    );
    assert_eq!(
        std::fs::read(l.ws().join("inside.txt")).unwrap(),
        b"inside\n"
    );
    // Inside paths work, and come back relative.
    let out = s
        .call("read_file", json!({"path": "inside.txt"}))
        .ok()
        .clone();
    assert_eq!(out["path"], "inside.txt");
}

#[test]
fn full_allows_the_same_reads_and_returns_absolute_paths() {
    let l = Layout::new();
    let mut s = Server::start(&l.ws(), &[]);
    let outside = std::fs::canonicalize(l.tmp.path().join("outside/secret.txt")).unwrap();
    for p in ["file-link", "dir-link/secret.txt", "../outside/secret.txt"] {
        let r = s.call("read_file", json!({"path": p}));
        let out: &Value = r.ok();
        assert_eq!(out["content"], "secret outside\n", "{p}");
        assert_eq!(out["path"], outside.to_str().unwrap(), "{p}");
    }
    let out = s
        .call("read_file", json!({"path": "inside.txt"}))
        .ok()
        .clone();
    let inside = std::fs::canonicalize(l.ws().join("inside.txt")).unwrap();
    assert_eq!(out["path"], inside.to_str().unwrap());
    // Explicit overrides narrow full to custom.
    let mut s = Server::start(
        &l.ws(),
        &["--unrestricted-paths=false", "--absolute-paths=false"],
    );
    assert_eq!(
        s.call("read_file", json!({"path": "file-link"})).code(),
        "path_boundary"
    );
    let out = s.call("server_info", json!({})).ok().clone();
    assert_eq!(out["policy"]["profile"], "custom");
}

/// A thread exchanging two names (`renameat2(RENAME_EXCHANGE)`) in a tight loop until stopped:
/// a directory and a symlink to an outside directory, for the race tests below.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
struct Swapper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
impl Swapper {
    fn start(a: std::path::PathBuf, b: std::path::PathBuf) -> Self {
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !flag.load(Ordering::Relaxed) {
                renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE)
                    .expect("renameat2(RENAME_EXCHANGE)");
                swaps += 1;
            }
            swaps
        });
        Self { stop, thread }
    }

    /// Stops the loop; how many exchanges it made.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Issue 11 item 2: a process of the user swaps `ws/sub` (a real directory) and `ws/swap` (a
/// symlink to a directory outside) with `renameat2(RENAME_EXCHANGE)` in a tight loop while the
/// assistant writes, edits and patches under `sub/` with `--profile edit`. Calls may fail (the
/// path changed under them), but nothing outside is ever created or changed, and no temporary
/// file is left behind anywhere.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_directory_swapped_for_a_symlink_never_lets_a_write_escape() {
    const ROUNDS: usize = 150;
    let tmp = Tree::new();
    tmp.write("ws/sub/f.txt", "line\n");
    tmp.write("outside/f.txt", "line\n");
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = root.join("ws");
    let outside = root.join("outside");
    symlink(&outside, ws.join("swap")).unwrap();
    let snapshot = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = walk(dir)
            .into_iter()
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap_or_default();
                (p, bytes)
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&outside);

    let swapper = Swapper::start(ws.join("sub"), ws.join("swap"));

    let mut s = Server::start(&ws, &["--profile", "edit"]);
    let mut succeeded = 0;
    let mut escaped_rounds = 0;
    for i in 0..ROUNDS {
        let replies = [
            s.call(
                "write_file",
                json!({"path": format!("sub/new-{i}.txt"), "content": "new\n"}),
            ),
            s.call(
                "write_file",
                json!({"path": "sub/f.txt", "content": format!("line {i}\n")}),
            ),
            s.call(
                "edit_file",
                json!({"path": "sub/f.txt", "old_text": "line", "new_text": "edited line"}),
            ),
            s.call(
                "apply_patch",
                json!({"patch": format!(
                    "*** Begin Patch\n*** Add File: sub/patch-{i}.txt\n+added\n\
                     *** Update File: sub/f.txt\n@@\n-line\n+patched line\n*** End Patch"
                )}),
            ),
        ];
        succeeded += replies.iter().filter(|r| !r.is_error).count();
        if snapshot(&outside) != before {
            escaped_rounds += 1;
            // Put the outside back so that every round is counted on its own.
            for (p, _) in snapshot(&outside) {
                if !before.iter().any(|(b, _)| *b == p) {
                    let _ = std::fs::remove_file(&p);
                }
            }
            for (p, bytes) in &before {
                std::fs::write(p, bytes).unwrap();
            }
        }
    }
    let swaps = swapper.stop();
    drop(s);

    let temps: Vec<String> = walk(&ws)
        .into_iter()
        .chain(walk(&outside))
        .filter(|p| p.ends_with(".machine-mcp.tmp"))
        .collect();
    eprintln!(
        "{ROUNDS} rounds of 4 writing calls, {swaps} swaps: {succeeded} calls succeeded, \
         {escaped_rounds} rounds changed the outside, {} temporary files left",
        temps.len()
    );
    assert!(swaps > 0, "the swapper ran");
    assert_eq!(escaped_rounds, 0, "rounds in which a write escaped");
    assert_eq!(temps, Vec::<String>::new(), "temporary files left behind");
}

/// Regression (issue 11 item 2, search start points and walks): `search_text` and `list_files`
/// walked and read by name, so a directory swapped for a symlink to an outside directory between
/// the check and the walk (or between listing a directory and descending into it) made them list
/// and read outside files. The same swap loop as the write test above runs while they list and
/// search under `sub/` and the whole workspace: no outside file's name or content ever comes back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_directory_swapped_for_a_symlink_never_lets_a_search_or_listing_read_outside() {
    const ROUNDS: usize = 150;
    let tmp = Tree::new();
    tmp.write("ws/sub/inside.txt", "inside needle\n");
    for i in 0..20 {
        tmp.write(
            &format!("outside/d{i}/outside-secret-{i}.txt"),
            "OUTSIDE needle\n",
        );
    }
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = root.join("ws");
    symlink(root.join("outside"), ws.join("swap")).unwrap();

    let swapper = Swapper::start(ws.join("sub"), ws.join("swap"));

    let mut s = Server::start(&ws, &["--profile", "review"]);
    let (mut answered, mut leaked_rounds) = (0, 0);
    let mut first_leak = None;
    for _ in 0..ROUNDS {
        let replies = [
            s.call("search_text", json!({"pattern": "needle", "path": "sub"})),
            s.call("search_text", json!({"pattern": "needle"})),
            s.call("list_files", json!({"path": "sub"})),
            s.call("list_files", json!({})),
        ];
        answered += replies.iter().filter(|r| !r.is_error).count();
        let leaked: Vec<String> = replies
            .iter()
            .map(|r| format!("{} {}", r.text, r.structured))
            .filter(|t| t.contains("OUTSIDE") || t.contains("outside-secret"))
            .collect();
        if !leaked.is_empty() {
            leaked_rounds += 1;
            first_leak.get_or_insert_with(|| leaked[0].chars().take(300).collect::<String>());
        }
    }
    let swaps = swapper.stop();
    drop(s);
    eprintln!(
        "{ROUNDS} rounds of 2 searches and 2 listings, {swaps} swaps: {answered} answered, \
         {leaked_rounds} rounds returned an outside name or content"
    );
    assert!(swaps > 0, "the swapper ran");
    assert_eq!(
        leaked_rounds, 0,
        "rounds that leaked; first: {first_leak:?}"
    );
}
