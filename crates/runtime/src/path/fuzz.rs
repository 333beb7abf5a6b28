//! Fuzz target for path confinement (bolero; see CONTRIBUTING.md "Fuzzing"): random paths made of the
//! names of a workspace full of symlinks — inside, outside, absolute, relative, dangling, chained,
//! looping — plus `.`, `..`, empty components and arbitrary text.

use std::{os::unix::fs::symlink, path::Path, time::Duration};

use super::{Component, Workspace, WorkspacePath};
use crate::call::error::ToolResult;

/// Time the target gets in the test suite (unless `BOLERO_RANDOM_TEST_TIME_MS` or
/// `BOLERO_RANDOM_ITERATIONS` is set).
const SHORT_RUN: Duration = Duration::from_secs(6);

/// Names a random path is made of: every entry of the fixture, names that do not exist, and the
/// special components.
const NAMES: [&str; 25] = [
    ".",
    "..",
    "",
    "a",
    "b",
    "file",
    "in",
    "up",
    "upup",
    "out",
    "abs_out",
    "dangle_in",
    "dangle_out",
    "dangle_rel_out",
    "dangle_chain",
    "loop",
    "loop_a",
    "self",
    "file_link",
    "in_sibling",
    "missing",
    "new",
    "secret",
    "ws",
    "ws-sibling",
];

/// `tmp/ws` (the workspace) and its sibling `tmp/ws-sibling`, linked every way.
fn fixture() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let t = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = t.join("ws");
    let sib = t.join("ws-sibling");
    std::fs::create_dir_all(ws.join("a/b")).unwrap();
    std::fs::create_dir_all(&sib).unwrap();
    std::fs::write(ws.join("file"), "f").unwrap();
    std::fs::write(ws.join("a/file"), "f").unwrap();
    std::fs::write(sib.join("secret"), "s").unwrap();
    let links: [(&str, &Path); 15] = [
        ("in", Path::new("a")),
        ("a/up", Path::new("..")),
        ("a/b/upup", Path::new("../../..")),
        ("out", Path::new("../ws-sibling")),
        ("abs_out", &sib),
        ("dangle_in", Path::new("a/missing")),
        ("dangle_out", Path::new("../ws-sibling/missing")),
        ("a/dangle_rel_out", Path::new("../../ws-sibling/new")),
        ("dangle_chain", Path::new("dangle_out")),
        ("loop", Path::new("loop")),
        ("loop_a", Path::new("loop_b")),
        ("loop_b", Path::new("loop_a")),
        ("self", Path::new(".")),
        ("file_link", Path::new("file")),
        ("a/b/in_sibling", Path::new("../../../ws-sibling/secret")),
    ];
    for (at, target) in links {
        symlink(target, ws.join(at)).unwrap();
    }
    (tmp, ws)
}

/// `real` is physical: absolute, without `.` or `..`, and every prefix of it that exists is its
/// own canonical path (no symlink left to follow, dangling or not). A write there lands there.
fn assert_physical(real: &Path, requested: &str) {
    assert!(real.is_absolute(), "{requested:?} → {real:?}");
    assert!(
        real.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "{requested:?} → {real:?} is not normalized"
    );
    for prefix in real.ancestors() {
        if std::fs::symlink_metadata(prefix).is_ok() {
            assert_eq!(
                std::fs::canonicalize(prefix).ok().as_deref(),
                Some(prefix),
                "{requested:?} → {real:?}: {prefix:?} is not physical"
            );
        }
    }
}

fn check(ws: &Workspace, requested: &str, entry: bool) {
    let resolved: ToolResult<WorkspacePath> = if entry {
        ws.resolve_entry(requested)
    } else {
        ws.resolve(requested)
    };
    let Ok(p) = resolved else { return };
    let real = p.real();
    // An entry's last component is the entry itself (a symlink stays a symlink).
    let physical = if entry {
        assert!(
            matches!(real.components().next_back(), Some(Component::Normal(_))),
            "{requested:?} → {real:?}"
        );
        real.parent().unwrap_or(real)
    } else {
        real
    };
    assert_physical(physical, requested);
    assert_eq!(
        p.exists(),
        std::fs::symlink_metadata(real).is_ok(),
        "{requested:?} → {real:?}"
    );
    if ws.restricted() {
        assert!(
            physical.starts_with(ws.root()),
            "{requested:?} → {real:?} escapes {:?}",
            ws.root()
        );
        let shown = ws.display(real);
        assert_eq!(
            if shown == "." {
                ws.root().to_path_buf()
            } else {
                ws.root().join(&shown)
            },
            real,
            "{requested:?}: rendered as {shown:?}"
        );
    }
}

/// Restricted: `resolve` never returns a path outside the workspace, and what it returns is
/// physical (a later open or write cannot be redirected by a link in it); `resolve_entry`'s
/// directory is. Unrestricted: results are physical too.
#[test]
fn fuzz_path_resolution_stays_inside_the_workspace() {
    let (_tmp, root) = fixture();
    let confined = Workspace::new(&root, true, false).unwrap();
    let open = confined.with_rules(false, true);
    let root_text = confined.root().to_string_lossy().into_owned();
    let sibling = confined
        .root()
        .with_file_name("ws-sibling")
        .to_string_lossy()
        .into_owned();
    bolero::check!()
        .with_type::<(Vec<u8>, u8, bool, String)>()
        .with_test_time(SHORT_RUN)
        .for_each(|(names, start, trailing, extra)| {
            let mut path = match start % 5 {
                0 => String::new(),
                1 => format!("{root_text}/"),
                2 => "/".to_owned(),
                3 => format!("{sibling}/"),
                _ => "./".to_owned(),
            };
            for (i, &n) in names.iter().enumerate() {
                if i > 0 {
                    path.push('/');
                }
                path.push_str(NAMES.get(usize::from(n % 27)).copied().unwrap_or(extra));
            }
            if *trailing {
                path.push('/');
            }
            for ws in [&confined, &open] {
                check(ws, &path, false);
                check(ws, &path, true);
            }
        });
}
