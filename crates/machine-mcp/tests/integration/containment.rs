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
