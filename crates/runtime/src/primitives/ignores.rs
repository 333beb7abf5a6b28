//! Ignore files (`.ignore`, `.gitignore`, `.git/info/exclude`, git's global excludes file) read
//! with a bound, compiled once and shared.
//!
//! The `ignore` crate reads every ignore file whole and compiles it per walk: a 100,000-line
//! `.gitignore` of globs took ~16 KB per pattern and call. Walks here turn the
//! crate's own ignore reading off and filter entries with an [`IgnoreFilter`] instead, which
//! reads each file up to [`IGNORE_FILE_MAX_BYTES`] and [`IGNORE_FILE_MAX_PATTERNS`] and takes
//! compiled matchers from the runtime's [`IgnoreCache`], so concurrent calls share one.
//!
//! Matching follows the crate's rules with `require_git(true)` (ripgrep's default, git's own
//! rule) and `parents(true)`: `.ignore` files apply anywhere; `.gitignore` files,
//! `.git/info/exclude` and the global excludes file apply only inside a repository (a directory
//! holding `.git` or `.jj`, at or above the entry), and only from the entry's directory up to the
//! nearest repository root, never above it. An override (include/exclude glob) that matches
//! decides alone; otherwise the nearest `.ignore` match wins, then the nearest `.gitignore` match,
//! then the nearest `.git/info/exclude` match, then the global excludes file; within one file the
//! last matching pattern wins. A filter counts the entries it leaves out ([`IgnoreFilter::ignored`]:
//! a directory once, its contents are not walked), so a tool can say how many and how to include
//! them.

use std::{
    collections::HashMap,
    fs::{self, File},
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    sync::{
        Arc, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::SystemTime,
};

use lock::Lock;

use crate::limits::{IGNORE_FILE_MAX_BYTES, IGNORE_FILE_MAX_PATTERNS, IGNORE_NOTES_MAX};
use ignore::{
    DirEntry, Match,
    gitignore::{Gitignore, GitignoreBuilder},
    overrides::Override,
};

use crate::path::Workspace;

/// Which cap cut an ignore file short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cap {
    /// The file is larger than [`IGNORE_FILE_MAX_BYTES`].
    Bytes,
    /// The file has more than [`IGNORE_FILE_MAX_PATTERNS`] patterns.
    Patterns,
}

/// One ignore file, compiled from at most its first [`IGNORE_FILE_MAX_PATTERNS`] patterns
/// within its first [`IGNORE_FILE_MAX_BYTES`].
#[derive(Debug)]
pub(crate) struct Rules {
    matcher: Gitignore,
    /// The file the rules come from.
    pub(crate) path: PathBuf,
    /// Set when the file went past a cap and only its beginning applies.
    pub(crate) capped: Option<Cap>,
}

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    ino: u64,
}

/// One cached file: its version and the compiled rules, if a walk still holds them. Its lock is
/// held while the file compiles, so concurrent first uses wait for one compilation.
type Slot = Arc<Lock<Weak<Rules>>>;

/// Compiled ignore files of every call of a runtime, by matcher root and file. Entries are
/// weak: a matcher lives while a walk uses it, so concurrent calls share it and an idle runtime
/// holds none.
#[derive(Debug, Default)]
pub(crate) struct IgnoreCache {
    compiled: Lock<HashMap<(PathBuf, PathBuf), (Stamp, Slot)>>,
}

impl IgnoreCache {
    /// The rules of the ignore file `file`, with patterns relative to `root`. `None` when the
    /// file does not exist, cannot be read or has no pattern (git skips unreadable ignore files
    /// too).
    pub(crate) fn load(&self, root: &Path, file: &Path) -> Option<Arc<Rules>> {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(file).ok().filter(|m| m.is_file())?;
        let stamp = Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            ino: meta.ino(),
        };
        let slot = {
            let mut map = self.compiled.lock();
            let key = (root.to_owned(), file.to_owned());
            match map.get(&key) {
                Some((s, slot)) if *s == stamp => slot.clone(),
                _ => {
                    // Drop entries no walk uses any more (and no compilation is filling).
                    map.retain(|_, (_, slot)| {
                        Arc::strong_count(slot) > 1
                            || slot.try_lock().is_some_and(|w| w.strong_count() > 0)
                    });
                    let slot = Slot::default();
                    map.insert(key, (stamp, slot.clone()));
                    slot
                }
            }
        };
        let mut weak = slot.lock();
        if let Some(rules) = weak.upgrade() {
            return Some(rules);
        }
        let rules = Arc::new(compile(root, file)?);
        *weak = Arc::downgrade(&rules);
        Some(rules)
    }
}

/// Reads `file` up to the caps and compiles it; `None` when it cannot be read or has no
/// pattern. Lines that are not valid globs are skipped, as git does.
fn compile(root: &Path, file: &Path) -> Option<Rules> {
    let f = File::open(file).ok()?;
    let mut reader = BufReader::new(f.take(IGNORE_FILE_MAX_BYTES as u64 + 1));
    let mut builder = GitignoreBuilder::new(root);
    let (mut read, mut patterns, mut capped) = (0usize, 0usize, None);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).ok()?;
        if n == 0 {
            break;
        }
        read += n;
        if read > IGNORE_FILE_MAX_BYTES {
            capped = Some(Cap::Bytes);
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() || text.starts_with('#') {
            continue;
        }
        if patterns == IGNORE_FILE_MAX_PATTERNS {
            capped = Some(Cap::Patterns);
            break;
        }
        if builder.add_line(Some(file.to_owned()), text).is_ok() {
            patterns += 1;
        }
    }
    if patterns == 0 && capped.is_none() {
        return None;
    }
    Some(Rules {
        matcher: builder.build().ok()?,
        path: file.to_owned(),
        capped,
    })
}

/// The ignore files of one directory.
#[derive(Debug)]
struct Level {
    ignore: Option<Arc<Rules>>,
    /// Read only inside a repository (`in_repo`).
    gitignore: Option<Arc<Rules>>,
    exclude: Option<Arc<Rules>>,
    /// The directory holds `.git` (a directory, or a file naming one) or `.jj`: a repository's
    /// root, above which its entries' `.gitignore` rules are not looked for.
    has_git: bool,
    /// This directory or one above it is a repository's root.
    in_repo: bool,
    parent: Option<Arc<Level>>,
}

/// The ignore rules of one walk: decides per entry (for `WalkBuilder::filter_entry`) and
/// collects the capped files it met.
#[derive(Debug)]
pub(crate) struct IgnoreFilter {
    cache: Arc<IgnoreCache>,
    overrides: Override,
    root: PathBuf,
    /// The levels of the root's ancestors, nearest first.
    above_root: Option<Arc<Level>>,
    global: Option<Arc<Rules>>,
    levels: Lock<HashMap<PathBuf, Arc<Level>>>,
    capped: Lock<Vec<(PathBuf, Cap)>>,
    /// Entries [`IgnoreFilter::keep`] left out.
    ignored: AtomicUsize,
}

impl IgnoreFilter {
    /// A filter for a walk of `root` (absolute) with the walk's `overrides`, reading ignore
    /// files in `root`'s ancestors and git's global excludes file too.
    pub(crate) fn new(cache: Arc<IgnoreCache>, root: &Path, overrides: Override) -> Self {
        let mut f = Self {
            cache,
            overrides,
            root: root.to_owned(),
            above_root: None,
            global: None,
            levels: Lock::default(),
            capped: Lock::default(),
            ignored: AtomicUsize::new(0),
        };
        let cwd = std::env::current_dir().unwrap_or_else(|_| root.to_owned());
        f.global = ignore::gitignore::gitconfig_excludes_path()
            .and_then(|p| f.cache.load(&cwd, &p))
            .inspect(|r| f.note(r));
        let ancestors: Vec<&Path> = root.ancestors().skip(1).collect();
        for dir in ancestors.into_iter().rev() {
            let parent = f.above_root.take();
            f.above_root = Some(f.level(dir, parent));
        }
        f
    }

    /// Whether the walk keeps `entry` (the crate has applied the overrides already); an entry
    /// left out is counted ([`IgnoreFilter::ignored`]).
    pub(crate) fn keep(&self, entry: &DirEntry) -> bool {
        let keep = self.decide(entry);
        if !keep {
            self.ignored.fetch_add(1, Ordering::Relaxed);
        }
        keep
    }

    /// How many entries [`IgnoreFilter::keep`] left out so far: files and directories (a
    /// directory counts once; what is under it is not walked).
    pub(crate) fn ignored(&self) -> usize {
        self.ignored.load(Ordering::Relaxed)
    }

    fn decide(&self, entry: &DirEntry) -> bool {
        if entry.depth() == 0 {
            return true;
        }
        let path = entry.path();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if !self.overrides.matched(path, is_dir).is_none() {
            return true;
        }
        let Some(dir) = path.parent() else {
            return true;
        };
        let level = self.level_of(dir);
        let in_repo = level.as_ref().is_some_and(|l| l.in_repo);
        let (mut m_ignore, mut m_gi, mut m_exclude) = (Match::None, Match::None, Match::None);
        // Git's rules come from the entry's directory up to the nearest repository root only.
        let mut saw_git = false;
        let mut at = level.as_ref();
        while let Some(l) = at {
            let matched = |r: &Option<Arc<Rules>>| {
                r.as_ref()
                    .map_or(Match::None, |r| r.matcher.matched(path, is_dir).map(|_| ()))
            };
            if m_ignore.is_none() {
                m_ignore = matched(&l.ignore);
            }
            if !saw_git && m_gi.is_none() {
                m_gi = matched(&l.gitignore);
            }
            if !saw_git && m_exclude.is_none() {
                m_exclude = matched(&l.exclude);
            }
            saw_git |= l.has_git;
            at = l.parent.as_ref();
        }
        let m = m_ignore.or(m_gi).or(m_exclude);
        if !m.is_none() {
            return !m.is_ignore();
        }
        !(in_repo
            && self
                .global
                .as_ref()
                .is_some_and(|r| r.matcher.matched(path, is_dir).is_ignore()))
    }

    /// The ignore files that went past a cap, in path order (at most [`IGNORE_NOTES_MAX`]).
    pub(crate) fn capped(&self) -> Vec<(PathBuf, Cap)> {
        let mut v = self.capped.lock().clone();
        v.sort();
        v.dedup();
        v.truncate(IGNORE_NOTES_MAX);
        v
    }

    /// The level of a directory under (or at) the root, built on first use.
    fn level_of(&self, dir: &Path) -> Option<Arc<Level>> {
        if !dir.starts_with(&self.root) {
            return self.above_root.clone();
        }
        if let Some(l) = self.levels.lock().get(dir) {
            return Some(l.clone());
        }
        let parent = match dir.parent() {
            Some(p) if dir != self.root => self.level_of(p),
            _ => self.above_root.clone(),
        };
        let level = self.level(dir, parent);
        let mut levels = self.levels.lock();
        Some(levels.entry(dir.to_owned()).or_insert(level).clone())
    }

    fn level(&self, dir: &Path, parent: Option<Arc<Level>>) -> Arc<Level> {
        let load = |root: &Path, file: PathBuf| {
            let rules = self.cache.load(root, &file);
            if let Some(r) = &rules {
                self.note(r);
            }
            rules
        };
        let dot_git = dir.join(".git");
        let git = fs::metadata(&dot_git).ok();
        let has_git = git.is_some() || dir.join(".jj").exists();
        let in_repo = has_git || parent.as_ref().is_some_and(|p| p.in_repo);
        let exclude = git
            .and_then(|m| git_common_dir(&dot_git, m.is_file()))
            .and_then(|common| load(dir, common.join("info/exclude")));
        Arc::new(Level {
            ignore: load(dir, dir.join(".ignore")),
            // Outside a repository a `.gitignore` applies to nothing (git and ripgrep agree).
            gitignore: in_repo.then(|| load(dir, dir.join(".gitignore"))).flatten(),
            exclude,
            has_git,
            in_repo,
            parent,
        })
    }

    fn note(&self, rules: &Rules) {
        if let Some(cap) = rules.capped {
            let mut v = self.capped.lock();
            if v.len() < 4 * IGNORE_NOTES_MAX {
                v.push((rules.path.clone(), cap));
            }
        }
    }
}

/// The git directory holding `info/exclude` for a `.git` entry: itself when it is a directory;
/// for a `.git` file (worktree, submodule) the `gitdir:` it names, or that directory's
/// `commondir`. As the `ignore` crate resolves it; `None` when the file says nothing usable.
fn git_common_dir(dot_git: &Path, is_file: bool) -> Option<PathBuf> {
    if !is_file {
        return Some(dot_git.to_owned());
    }
    let first_line = |p: &Path| -> Option<String> {
        let mut line = String::new();
        BufReader::new(File::open(p).ok()?.take(4096))
            .read_line(&mut line)
            .ok()?;
        Some(line.trim_end_matches(['\n', '\r']).to_owned())
    };
    let git_dir = PathBuf::from(first_line(dot_git)?.strip_prefix("gitdir: ")?);
    let common = first_line(&git_dir.join("commondir"))?;
    Some(if common.starts_with('.') {
        git_dir.join(common)
    } else {
        PathBuf::from(common)
    })
}

/// What a walk's summary says when ignore rules left `count` entries out (nothing when none):
/// how many, and the argument that includes them.
pub(crate) fn left_out(count: usize) -> String {
    match count {
        0 => String::new(),
        1 => r#", 1 entry left out by ignore rules (add "include_ignored": true to include it)"#
            .to_owned(),
        n => format!(
            r#", {n} entries left out by ignore rules (add "include_ignored": true to include them)"#
        ),
    }
}

/// The `notes` a tool returns for the capped ignore files of a walk. A file outside the
/// workspace (an ancestor's, or git's global excludes file) is named by its file name only.
pub(crate) fn notes(capped: &[(PathBuf, Cap)], ws: &Workspace) -> Vec<String> {
    let display = |p: &Path| {
        if p.starts_with(ws.root()) {
            ws.display(p)
        } else {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            format!("{name} (outside the workspace)")
        }
    };
    capped
        .iter()
        .map(|(path, cap)| match cap {
            Cap::Bytes => format!(
                "ignore file {} is larger than {IGNORE_FILE_MAX_BYTES} bytes: only its first \
                 {IGNORE_FILE_MAX_BYTES} bytes apply, so files its later patterns ignore may be \
                 included",
                display(path)
            ),
            Cap::Patterns => format!(
                "ignore file {} has more than {IGNORE_FILE_MAX_PATTERNS} patterns: only its \
                 first {IGNORE_FILE_MAX_PATTERNS} apply, so files its later patterns ignore may \
                 be included",
                display(path)
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use ignore::{WalkBuilder, overrides::OverrideBuilder};

    use super::*;

    /// Files a walk of `root` keeps with our filter, relative and sorted.
    fn walk(cache: &Arc<IgnoreCache>, root: &Path, glob: Option<&str>) -> Vec<String> {
        walk_capped(cache, root, glob).0
    }

    /// [`walk`], and the capped files the filter met.
    fn walk_capped(
        cache: &Arc<IgnoreCache>,
        root: &Path,
        glob: Option<&str>,
    ) -> (Vec<String>, Vec<(PathBuf, Cap)>) {
        let overrides = overrides(root, glob);
        let filter = Arc::new(IgnoreFilter::new(cache.clone(), root, overrides.clone()));
        let keep = filter.clone();
        let mut wb = WalkBuilder::new(root);
        wb.standard_filters(false).overrides(overrides);
        wb.filter_entry(move |e| e.file_name() != ".git" && keep.keep(e));
        (files(&wb, root), filter.capped())
    }

    /// The same walk with the crate reading the ignore files itself (ripgrep's defaults:
    /// git's rules only inside a repository).
    fn crate_walk(root: &Path, glob: Option<&str>) -> Vec<String> {
        let mut wb = WalkBuilder::new(root);
        wb.hidden(false)
            .overrides(overrides(root, glob))
            .filter_entry(|e| e.file_name() != ".git");
        files(&wb, root)
    }

    fn overrides(root: &Path, glob: Option<&str>) -> Override {
        let mut ob = OverrideBuilder::new(root);
        if let Some(g) = glob {
            ob.add(g).unwrap();
        }
        ob.build().unwrap()
    }

    fn files(wb: &WalkBuilder, root: &Path) -> Vec<String> {
        let mut files: Vec<String> = wb
            .build()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| {
                let rel = e.path().strip_prefix(root).unwrap();
                rel.to_string_lossy().into_owned()
            })
            .collect();
        files.sort();
        files
    }

    fn write(root: &Path, rel: &str, body: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }

    #[test]
    fn rules_follow_the_ignore_crate_precedence() {
        let d = tempfile::tempdir().unwrap();
        let outer = d.path().canonicalize().unwrap();
        write(&outer, ".gitignore", "*.outer\n");
        let root = outer.join("ws");
        write(&root, ".gitignore", "*.log\nbuild/\n!keep.log\n");
        write(&root, ".ignore", "*.tmp\n!x.log\n");
        write(&root, ".git/info/exclude", "*.excl\n");
        write(&root, "sub/.gitignore", "!sub.log\n");
        for f in [
            "a.log",
            "keep.log",
            "x.log",
            "a.tmp",
            "a.excl",
            "a.outer",
            "a.txt",
            "build/b.txt",
            "sub/sub.log",
            "sub/other.log",
        ] {
            write(&root, f, "");
        }
        let cache = Arc::new(IgnoreCache::default());
        // `ws` is a repository (`.git`): the `.gitignore` above its root does not apply.
        assert_eq!(
            walk(&cache, &root, None),
            [
                ".gitignore",
                ".ignore",
                "a.outer",
                "a.txt",
                "keep.log",
                "sub/.gitignore",
                "sub/sub.log",
                "x.log"
            ]
        );
        assert_eq!(walk(&cache, &root, None), crate_walk(&root, None));
        // An include glob that matches decides alone, as in the crate.
        assert_eq!(
            walk(&cache, &root, Some("*.log")),
            ["a.log", "keep.log", "sub/other.log", "sub/sub.log", "x.log"]
        );
        assert_eq!(
            walk(&cache, &root, Some("*.log")),
            crate_walk(&root, Some("*.log"))
        );
    }

    #[test]
    fn gitignore_applies_only_inside_a_repository_and_ignore_files_anywhere() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        // An unpacked tarball: no repository, a top `.gitignore` that ignores everything.
        write(&root, ".gitignore", "/*\n");
        write(&root, ".ignore", "*.tmp\n");
        write(&root, "a.txt", "");
        write(&root, "a.tmp", "");
        // A repository inside it: its own `.gitignore` applies within it, the outer one not.
        write(&root, "repo/.git/HEAD", "");
        write(&root, "repo/.gitignore", "*.log\n");
        write(&root, "repo/b.log", "");
        write(&root, "repo/b.txt", "");
        write(&root, "repo/b.tmp", "");
        // A `.gitignore` in a plain directory is nothing either.
        write(&root, "plain/.gitignore", "*\n");
        write(&root, "plain/c.txt", "");
        let cache = Arc::new(IgnoreCache::default());
        let expected = [
            ".gitignore",
            ".ignore",
            "a.txt",
            "plain/.gitignore",
            "plain/c.txt",
            "repo/.git/HEAD",
            "repo/.gitignore",
            "repo/b.txt",
        ];
        let kept = walk_with_git(&cache, &root);
        assert_eq!(kept.0, expected);
        assert_eq!(kept.1, 3, "a.tmp, repo/b.log, repo/b.tmp were left out");
        let mut by_crate = WalkBuilder::new(&root);
        by_crate.hidden(false);
        assert_eq!(files(&by_crate, &root), expected, "as ripgrep's walker");
        // Once the top is a repository, its `.gitignore` applies to everything under it.
        write(&root, ".git/HEAD", "");
        let kept = walk(&cache, &root, None);
        assert!(kept.is_empty(), "{kept:?}");
    }

    /// A walk that does not skip `.git`, and the number of entries the filter left out.
    fn walk_with_git(cache: &Arc<IgnoreCache>, root: &Path) -> (Vec<String>, usize) {
        let overrides = overrides(root, None);
        let filter = Arc::new(IgnoreFilter::new(cache.clone(), root, overrides.clone()));
        let keep = filter.clone();
        let mut wb = WalkBuilder::new(root);
        wb.standard_filters(false).overrides(overrides);
        wb.filter_entry(move |e| keep.keep(e));
        (files(&wb, root), filter.ignored())
    }

    #[test]
    fn a_file_past_the_pattern_cap_applies_its_first_patterns_and_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let mut body = String::from("# comments do not count\n\n");
        for i in 0..IGNORE_FILE_MAX_PATTERNS - 1 {
            writeln!(body, "f{i}.x").unwrap();
        }
        body.push_str("first.txt\nlast.txt\n");
        write(&root, ".gitignore", &body);
        // A repository, where a `.gitignore` applies.
        fs::create_dir(root.join(".git")).unwrap();
        write(&root, "first.txt", "");
        write(&root, "last.txt", "");
        let cache = Arc::new(IgnoreCache::default());
        let (files, capped) = walk_capped(&cache, &root, None);
        assert_eq!(files, [".gitignore", "last.txt"]);
        assert_eq!(capped, [(root.join(".gitignore"), Cap::Patterns)]);
    }

    #[test]
    fn a_file_past_the_byte_cap_applies_its_first_whole_lines_and_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let mut body = String::from("first.txt\n");
        body.push_str(&"#".repeat(IGNORE_FILE_MAX_BYTES - body.len() - 4));
        body.push_str("\nlast.txt\n");
        write(&root, ".gitignore", &body);
        let rules = IgnoreCache::default()
            .load(&root, &root.join(".gitignore"))
            .unwrap();
        assert_eq!(rules.capped, Some(Cap::Bytes));
        assert!(
            rules
                .matcher
                .matched(root.join("first.txt"), false)
                .is_ignore()
        );
        assert!(
            rules
                .matcher
                .matched(root.join("last.txt"), false)
                .is_none()
        );
    }

    #[test]
    fn concurrent_users_share_one_matcher_until_the_file_changes() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let file = root.join(".gitignore");
        write(&root, ".gitignore", "a\n");
        let cache = IgnoreCache::default();
        let first = cache.load(&root, &file).unwrap();
        let second = cache.load(&root, &file).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        write(&root, ".gitignore", "a\nb\n");
        let changed = cache.load(&root, &file).unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert!(changed.matcher.matched(root.join("b"), false).is_ignore());
        // Nothing is kept once no walk holds the rules.
        let weak = Arc::downgrade(&changed);
        drop((first, second, changed));
        assert!(weak.upgrade().is_none());
    }
}
