//! The engine of `search_text`, on ripgrep's crates: candidate files from `ignore`, lines from
//! `grep-searcher`.
//!
//! Results come in a total order so that a capped page can be continued: candidate files are
//! sorted by path (component-wise, which is the order of a depth-first walk with sorted
//! directories), searched in parallel, and merged back in that order. The search stops as soon as
//! the first `max_matches` matches in that order are known; a [`Cursor`] names the file and the
//! number of its matches already returned, so the next page starts exactly there.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{
        Condvar,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::Duration,
};

use lock::Lock;

use grep_matcher::Matcher;
use grep_regex::RegexMatcher;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::{WalkBuilder, WalkState, overrides::OverrideBuilder};
use tokio_util::sync::CancellationToken;

use crate::{
    path::{own::LeftOut, path_order},
    primitives::{
        ignores::{Cap, IgnoreCache, IgnoreFilter},
        skipped::SkipList,
    },
};

/// Where to search and which files count.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// A directory to walk or a single file (canonical).
    pub(crate) root: PathBuf,
    /// Gitignore-style globs a file must match (any of them), relative to `root`.
    pub(crate) include: Vec<String>,
    /// Gitignore-style globs that exclude files and directories.
    pub(crate) exclude: Vec<String>,
    /// Search files that `.gitignore`, `.ignore` and git excludes would skip.
    pub(crate) include_ignored: bool,
    /// Worker threads for walking and searching.
    pub(crate) threads: usize,
    /// Compiled ignore files shared with concurrent calls.
    pub(crate) ignore_cache: std::sync::Arc<IgnoreCache>,
    /// Leaves out the server's own files and records them (`Workspace::left_out`).
    pub(crate) left_out: std::sync::Arc<LeftOut>,
}

/// Resume point of a search: files before `path` are done, and the first `skip` matches of `path`
/// were returned already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) path: PathBuf,
    pub(crate) skip: usize,
}

/// One matching line.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    /// Index into the candidate list.
    pub(crate) file: usize,
    /// 1-based line number.
    pub(crate) line: u64,
    /// 1-based byte column of the first match on the line.
    pub(crate) column: u64,
    /// The line without its line break, lossily decoded, cut around the match.
    pub(crate) text: String,
    /// Up to `context` lines before, oldest first.
    pub(crate) before: Vec<String>,
    /// Up to `context` lines after.
    pub(crate) after: Vec<String>,
}

/// What a search found.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) hits: Vec<Hit>,
    /// Where the next page starts; `None` when every candidate was searched to its end.
    pub(crate) next: Option<Cursor>,
    /// Files actually opened and searched (some only partly).
    pub(crate) files_searched: usize,
    /// Files that could not be read (searched files only, so at most `files_searched`).
    pub(crate) unreadable: usize,
    /// Those files with their reasons.
    pub(crate) skipped: SkipList,
    pub(crate) cancelled: bool,
}

/// Progress of a running search.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    pub(crate) files_done: usize,
    pub(crate) files_total: usize,
    pub(crate) matches: usize,
}

/// The files a search will look at.
#[derive(Debug, Default)]
pub(crate) struct Candidates {
    /// Regular files, sorted by [`path_order`].
    pub(crate) files: Vec<PathBuf>,
    /// Directories (and entries) the walk could not read, so files under them are missing.
    pub(crate) skipped: SkipList,
    /// Ignore files that went past a cap and apply only in part.
    pub(crate) capped_ignore_files: Vec<(PathBuf, Cap)>,
    /// Entries ignore rules left out (a directory once; 0 with `include_ignored`).
    pub(crate) ignored: usize,
}

/// Lists the regular files under `scope.root` that the filters keep, sorted by path. Symlinks are
/// never followed, and `.git` directories and the server's own files (`scope.left_out`, which
/// records them) are skipped. A directory that cannot be read (permission
/// denied, a path longer than PATH_MAX, an I/O error) goes to `skipped`, never silently away —
/// by name when `reachable` says its path is still there, else counted as changed (the walk
/// descends by name, so a directory swapped for a symlink can lead it outside; the files it
/// lists there are refused when [`Run::open`] opens them).
///
/// # Errors
/// A bad include or exclude glob, with the glob in the message.
pub(crate) fn candidates(
    scope: &Scope,
    cancel: &CancellationToken,
    reachable: &(dyn Fn(&Path) -> bool + Sync),
) -> Result<Candidates, String> {
    if scope.root.is_file() {
        return Ok(Candidates {
            files: vec![scope.root.clone()],
            skipped: SkipList::default(),
            capped_ignore_files: Vec::new(),
            ignored: 0,
        });
    }
    let mut ob = OverrideBuilder::new(&scope.root);
    for g in &scope.include {
        ob.add(g)
            .map_err(|e| format!("bad include glob {g:?}: {e}"))?;
    }
    for g in &scope.exclude {
        ob.add(&format!("!{g}"))
            .map_err(|e| format!("bad exclude glob {g:?}: {e}"))?;
    }
    let overrides = ob.build().map_err(|e| format!("bad glob: {e}"))?;
    let filter = (!scope.include_ignored).then(|| {
        std::sync::Arc::new(IgnoreFilter::new(
            scope.ignore_cache.clone(),
            &scope.root,
            overrides.clone(),
        ))
    });
    let mut wb = WalkBuilder::new(&scope.root);
    wb.standard_filters(false)
        .follow_links(false)
        .overrides(overrides)
        .threads(scope.threads);
    let keep = filter.clone();
    let own = scope.left_out.clone();
    wb.filter_entry(move |e| {
        e.file_name() != ".git" && own.keep(e.path()) && keep.as_ref().is_none_or(|f| f.keep(e))
    });
    let found = Lock::new(Vec::new());
    let skipped = Lock::new(SkipList::default());
    wb.build_parallel().run(|| {
        let (found, skipped) = (&found, &skipped);
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            match entry {
                Ok(e) => {
                    if e.file_type().is_some_and(|t| t.is_file()) {
                        let mut v = found.lock();
                        v.push(e.into_path());
                    }
                }
                Err(err) => {
                    let mut s = skipped.lock();
                    s.push_walk_error(&err, &scope.root, reachable);
                }
            }
            WalkState::Continue
        })
    });
    let mut files = found.into_inner();
    files.sort_unstable_by(|a, b| path_order(a, b));
    Ok(Candidates {
        files,
        skipped: skipped.into_inner(),
        capped_ignore_files: filter.as_ref().map(|f| f.capped()).unwrap_or_default(),
        ignored: filter.map_or(0, |f| f.ignored()),
    })
}

/// Settings of one search run.
pub(crate) struct Run<'a> {
    pub(crate) matcher: &'a RegexMatcher,
    pub(crate) context: usize,
    pub(crate) max_matches: usize,
    /// Most characters of the hits' text (by `cost`): a page also stops before the hit that
    /// would go past it (but holds at least one hit).
    pub(crate) max_chars: usize,
    /// Characters a hit takes in the result's text.
    pub(crate) cost: &'a (dyn Fn(&Path, &Hit) -> usize + Sync),
    pub(crate) line_max_bytes: usize,
    pub(crate) threads: usize,
    pub(crate) cancel: &'a CancellationToken,
    /// The search's start (`Scope::root`): where files that changed under it are counted.
    pub(crate) root: &'a Path,
    /// Opens a file of the walk for reading. The tool's opens it beneath the workspace root
    /// without following a symlink (`Workspace::open_file`), so a directory swapped
    /// for a symlink during the walk cannot make it read outside.
    pub(crate) open: &'a (dyn Fn(&Path) -> std::io::Result<std::fs::File> + Sync),
    /// Whether an error of [`Run::open`] says the path changed under the walk
    /// (`Workspace::changed_under`): such a file is counted, not named, in `skipped`.
    pub(crate) changed: fn(&std::io::Error) -> bool,
}

/// Most files one worker claims at once; runs start at one file and double up to this, so a
/// search that hits its cap early opens few files, and a long one takes one lock and sends one
/// message per run instead of per file.
const MAX_RUN: usize = 64;

/// Dispatch state shared by the workers (one lock per run of files).
struct Sched {
    /// Next file index to hand out.
    next: usize,
    /// Length of the next run.
    run: usize,
    /// Matches found per file, once searched.
    counts: Vec<Option<usize>>,
    /// Files `0..frontier` are all searched.
    frontier: usize,
    /// Matches in files `0..frontier`.
    prefix: usize,
}

/// Searches `files` in order from `cursor`, returning the first `max_matches` hits.
///
/// Workers claim runs of consecutive files, never more than a window ahead of the first file not
/// yet searched, so the work done past the cap stays bounded; the merger takes results in file
/// order and stops at the cap.
pub(crate) fn run(
    opts: &Run<'_>,
    mut files: Vec<PathBuf>,
    cursor: Option<Cursor>,
    progress: &mut dyn FnMut(Progress),
) -> Outcome {
    let mut first_skip = 0;
    if let Some(c) = &cursor {
        let start = files.partition_point(|p| path_order(p, &c.path).is_lt());
        if files.get(start) == Some(&c.path) {
            first_skip = c.skip;
        }
        files.drain(..start);
    }
    let total = files.len();
    let threads = opts.threads.max(1);
    // How far past the first unsearched file runs may start: at least two files per thread, then
    // as far as the confirmed prefix reaches (doubling), at most two full runs per thread.
    let window = |frontier: usize| (2 * threads).max(frontier).min(2 * threads * MAX_RUN);
    let stop = AtomicBool::new(false);
    let opened = AtomicUsize::new(0);
    let sched = Lock::new(Sched {
        next: 0,
        run: 1,
        counts: vec![None; total],
        frontier: 0,
        prefix: 0,
    });
    let advanced = Condvar::new();
    let (tx, rx) = mpsc::channel::<Vec<(usize, FileResult)>>();
    let files_ref = &files;
    let mut out = Outcome {
        files: Vec::new(),
        hits: Vec::new(),
        next: None,
        files_searched: 0,
        unreadable: 0,
        skipped: SkipList::default(),
        cancelled: false,
    };
    std::thread::scope(|s| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (stop, opened, sched, advanced) = (&stop, &opened, &sched, &advanced);
            s.spawn(move || {
                let mut searcher = SearcherBuilder::new()
                    .line_number(true)
                    .binary_detection(BinaryDetection::quit(0))
                    .before_context(opts.context)
                    .after_context(opts.context)
                    .build();
                loop {
                    // Claim a run within the window.
                    let (start, end, prefix) = {
                        let mut g = sched.lock();
                        loop {
                            if stop.load(Ordering::Relaxed)
                                || opts.cancel.is_cancelled()
                                || g.next >= total
                            {
                                return;
                            }
                            if g.next < g.frontier + window(g.frontier) {
                                break;
                            }
                            g = match advanced.wait_timeout(g, Duration::from_millis(50)) {
                                Ok((g, _)) => g,
                                Err(_) => return,
                            };
                        }
                        let start = g.next;
                        let end = (start + g.run)
                            .min(total)
                            .min(g.frontier + window(g.frontier));
                        g.next = end;
                        g.run = (g.run * 2).min(MAX_RUN);
                        (start, end, g.prefix)
                    };
                    let mut batch = Vec::with_capacity(end - start);
                    let mut local = 0usize;
                    for (i, path) in files_ref.iter().enumerate().take(end).skip(start) {
                        if stop.load(Ordering::Relaxed) || opts.cancel.is_cancelled() {
                            break;
                        }
                        opened.fetch_add(1, Ordering::Relaxed);
                        let skip = if i == 0 { first_skip } else { 0 };
                        let need = opts.max_matches.saturating_sub(prefix + local).max(1);
                        let r = search_file(&mut searcher, opts, path, skip + need, stop);
                        local += r.hits.len().saturating_sub(skip);
                        batch.push((i, r));
                        // Everything after this file is beyond the cap for sure.
                        if prefix + local >= opts.max_matches && i + 1 < end {
                            break;
                        }
                    }
                    {
                        let mut g = sched.lock();
                        for (i, r) in &batch {
                            let skip = if *i == 0 { first_skip } else { 0 };
                            g.counts[*i] = Some(r.hits.len().saturating_sub(skip));
                        }
                        while let Some(Some(n)) = g.counts.get(g.frontier).copied() {
                            g.prefix += n;
                            g.frontier += 1;
                        }
                        if g.prefix >= opts.max_matches {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    advanced.notify_all();
                    let complete = batch.len() == end - start;
                    if tx.send(batch).is_err() || !complete {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut pending: BTreeMap<usize, FileResult> = BTreeMap::new();
        let mut frontier = 0;
        let mut last_progress: Option<tokio::time::Instant> = None;
        let mut chars = 0usize;
        'merge: loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(batch) => pending.extend(batch),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if pending.is_empty() {
                        break 'merge;
                    }
                }
            }
            if opts.cancel.is_cancelled() {
                stop.store(true, Ordering::Relaxed);
                out.cancelled = true;
                break 'merge;
            }
            while let Some(r) = pending.remove(&frontier) {
                let file_index = frontier;
                frontier += 1;
                if let Some(err) = &r.error {
                    out.unreadable += 1;
                    if r.hits.is_empty() && (opts.changed)(err) {
                        out.skipped.push_changed(opts.root);
                    } else {
                        out.skipped.push_io(files_ref[file_index].clone(), err);
                    }
                }
                let skip = if file_index == 0 { first_skip } else { 0 };
                let available = r.hits.len().saturating_sub(skip);
                let room = opts.max_matches - out.hits.len();
                let take = available.min(room);
                let mut taken = 0;
                let mut over_budget = false;
                for mut h in r.hits.into_iter().skip(skip).take(take) {
                    let c = (opts.cost)(&files_ref[file_index], &h);
                    if !out.hits.is_empty() && chars + c > opts.max_chars {
                        over_budget = true;
                        break;
                    }
                    chars += c;
                    h.file = out.files.len();
                    out.hits.push(h);
                    taken += 1;
                }
                if taken > 0 {
                    out.files.push(files_ref[file_index].clone());
                }
                if over_budget {
                    stop.store(true, Ordering::Relaxed);
                    out.next = Some(Cursor {
                        path: files_ref[file_index].clone(),
                        skip: skip + taken,
                    });
                    break 'merge;
                }
                if out.hits.len() >= opts.max_matches {
                    stop.store(true, Ordering::Relaxed);
                    let more_here = take < available || r.hit_limit;
                    out.next = if more_here {
                        Some(Cursor {
                            path: files_ref[file_index].clone(),
                            skip: skip + take,
                        })
                    } else {
                        files_ref.get(file_index + 1).map(|p| Cursor {
                            path: p.clone(),
                            skip: 0,
                        })
                    };
                    break 'merge;
                }
            }
            if frontier >= total {
                break 'merge;
            }
            let now = tokio::time::Instant::now();
            if last_progress
                .is_none_or(|t| now.duration_since(t) >= crate::limits::PROGRESS_MIN_INTERVAL)
            {
                last_progress = Some(now);
                progress(Progress {
                    files_done: frontier,
                    files_total: total,
                    matches: out.hits.len(),
                });
            }
        }
        stop.store(true, Ordering::Relaxed);
        advanced.notify_all();
    });
    out.files_searched = opened.load(Ordering::Relaxed);
    out
}

struct FileResult {
    hits: Vec<Hit>,
    /// The search stopped at its match limit, so the file may hold more.
    hit_limit: bool,
    /// Why the file could not be opened or read to its end (matches before a read error stay).
    error: Option<std::io::Error>,
}

fn search_file(
    searcher: &mut Searcher,
    opts: &Run<'_>,
    path: &Path,
    limit: usize,
    stop: &AtomicBool,
) -> FileResult {
    let mut sink = Collect {
        matcher: opts.matcher,
        limit,
        context: opts.context as u64,
        stop,
        cancel: opts.cancel,
        matches: Vec::new(),
        lines: HashMap::new(),
        last_match_line: 0,
        hit_limit: false,
    };
    let error = match (opts.open)(path) {
        Ok(file) => searcher.search_file(opts.matcher, &file, &mut sink).err(),
        Err(e) => Some(e),
    };
    let Collect {
        matches,
        lines,
        hit_limit,
        ..
    } = sink;
    let c = opts.context as u64;
    let hits = matches
        .into_iter()
        .map(|(line, column, text)| {
            let around = |range: std::ops::RangeInclusive<u64>| {
                range
                    .filter_map(|l| lines.get(&l).cloned())
                    .collect::<Vec<_>>()
            };
            Hit {
                file: 0,
                line,
                column,
                before: if c == 0 {
                    Vec::new()
                } else {
                    around(line.saturating_sub(c).max(1)..=line - 1)
                },
                after: if c == 0 {
                    Vec::new()
                } else {
                    around(line + 1..=line + c)
                },
                text: cut_line(&text, column as usize - 1, opts.line_max_bytes),
            }
        })
        .collect();
    FileResult {
        hits,
        hit_limit,
        error,
    }
}

struct Collect<'a> {
    matcher: &'a RegexMatcher,
    limit: usize,
    context: u64,
    stop: &'a AtomicBool,
    cancel: &'a CancellationToken,
    matches: Vec<(u64, u64, String)>,
    /// Every line seen (matches and context), for assembling per-match context.
    lines: HashMap<u64, String>,
    last_match_line: u64,
    hit_limit: bool,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.cancel.is_cancelled() {
            return Ok(false);
        }
        if self.matches.len() >= self.limit {
            self.hit_limit = true;
            return Ok(false);
        }
        let line = mat.line_number().unwrap_or(0);
        let bytes = strip_eol(mat.bytes());
        let column = self
            .matcher
            .find(bytes)
            .ok()
            .flatten()
            .map_or(1, |m| m.start() as u64 + 1);
        let text = crate::primitives::text::lossy(bytes).into_owned();
        if self.context > 0 {
            self.lines
                .insert(line, cut_line(&text, column as usize - 1, 200));
        }
        self.matches.push((line, column, text));
        self.last_match_line = line;
        if self.matches.len() < self.limit {
            return Ok(true);
        }
        // At the limit the file may hold more; keep going only for the after-context.
        self.hit_limit = true;
        Ok(self.context > 0)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if self.stop.load(Ordering::Relaxed) && self.matches.len() < self.limit {
            return Ok(false);
        }
        let line = ctx.line_number().unwrap_or(0);
        let text = crate::primitives::text::lossy(strip_eol(ctx.bytes()));
        self.lines.insert(line, cut_line(&text, 0, 200));
        if self.matches.len() >= self.limit && line >= self.last_match_line + self.context {
            self.hit_limit = true;
            return Ok(false);
        }
        Ok(true)
    }
}

fn strip_eol(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// Cuts `line` to about `max` bytes around byte offset `at`, marking cut ends with `…`.
fn cut_line(line: &str, at: usize, max: usize) -> String {
    if line.len() <= max {
        return line.to_owned();
    }
    let mut start = at
        .saturating_sub(max / 4)
        .min(line.len().saturating_sub(max));
    while !line.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + max).min(line.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let mut s = String::with_capacity(max + 8);
    if start > 0 {
        s.push('…');
    }
    s.push_str(&line[start..end]);
    if end < line.len() {
        s.push('…');
    }
    s
}

/// Worker threads for a search: the machine's parallelism, between 1 and 8.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8)
}

#[cfg(test)]
mod tests {
    use grep_regex::RegexMatcherBuilder;

    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for f in 0..5 {
            let body: String = (0..10).map(|i| format!("needle {f}-{i}\nhay\n")).collect();
            std::fs::write(d.path().join(format!("f{f}.txt")), body).unwrap();
        }
        // A repository, where a `.gitignore` applies.
        std::fs::create_dir(d.path().join(".git")).unwrap();
        std::fs::write(d.path().join(".gitignore"), "ignored.txt\n").unwrap();
        std::fs::write(d.path().join("ignored.txt"), "needle\n").unwrap();
        d
    }

    fn go(root: &Path, max: usize, cursor: Option<Cursor>) -> Outcome {
        let scope = Scope {
            root: root.to_owned(),
            include: vec![],
            exclude: vec![],
            include_ignored: false,
            threads: 2,
            ignore_cache: Default::default(),
            left_out: Default::default(),
        };
        let cancel = CancellationToken::new();
        let files = candidates(&scope, &cancel, &|_| true).unwrap().files;
        let m = RegexMatcherBuilder::new()
            .fixed_strings(true)
            .build("needle")
            .unwrap();
        let opts = Run {
            matcher: &m,
            context: 1,
            max_matches: max,
            max_chars: usize::MAX,
            cost: &|_, _| 0,
            line_max_bytes: 500,
            threads: 2,
            cancel: &cancel,
            root,
            open: &|p| std::fs::File::open(p),
            changed: |_| false,
        };
        run(&opts, files, cursor, &mut |_| {})
    }

    #[test]
    fn pages_cover_every_match_exactly_once_in_order() {
        let d = tree();
        let mut seen = Vec::new();
        let mut cursor = None;
        for _ in 0..20 {
            let o = go(d.path(), 7, cursor.clone());
            for h in &o.hits {
                seen.push(format!("{}:{}", o.files[h.file].display(), h.line));
                assert_eq!(h.after, vec!["hay".to_owned()]);
            }
            cursor = o.next;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(seen.len(), 50, "ignored.txt is skipped and nothing repeats");
        let mut sorted = seen.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 50);
    }

    #[test]
    fn a_character_budget_ends_a_page_and_the_cursor_resumes_at_the_next_hit() {
        let d = tree();
        let scope = Scope {
            root: d.path().to_owned(),
            include: vec![],
            exclude: vec![],
            include_ignored: false,
            threads: 2,
            ignore_cache: Default::default(),
            left_out: Default::default(),
        };
        let cancel = CancellationToken::new();
        let m = RegexMatcherBuilder::new()
            .fixed_strings(true)
            .build("needle")
            .unwrap();
        let mut seen = Vec::new();
        let mut cursor = None;
        for _ in 0..30 {
            let files = candidates(&scope, &cancel, &|_| true).unwrap().files;
            let opts = Run {
                matcher: &m,
                context: 0,
                max_matches: 100,
                max_chars: 25,
                cost: &|_, h| h.text.len() + 1,
                line_max_bytes: 500,
                threads: 2,
                cancel: &cancel,
                root: d.path(),
                open: &|p| std::fs::File::open(p),
                changed: |_| false,
            };
            let o = run(&opts, files, cursor.clone(), &mut |_| {});
            assert!(o.hits.len() <= 2, "each hit costs 11, so two fit in 25");
            seen.extend(o.hits.iter().map(|h| h.text.clone()));
            cursor = o.next;
            if cursor.is_none() {
                break;
            }
        }
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!((seen.len(), unique.len()), (50, 50));
    }

    #[test]
    fn the_cap_stops_the_search_early() {
        let d = tree();
        let o = go(d.path(), 3, None);
        assert_eq!(o.hits.len(), 3);
        assert!(
            o.files_searched <= 4,
            "searched {} (at most 2 per thread ahead)",
            o.files_searched
        );
        assert_eq!(o.next.as_ref().unwrap().skip, 3);
    }

    #[test]
    fn cut_line_keeps_the_match_in_view() {
        let line = format!("{}MATCH{}", "a".repeat(5000), "b".repeat(5000));
        let c = cut_line(&line, 5000, 100);
        assert!(c.contains("MATCH"));
        assert!(c.len() < 110);
    }
}
