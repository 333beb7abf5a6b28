//! Project facts and registered commands: `project_overview`,
//! `list_commands`, `run_command`, and [`facts_summary`] for `session_bootstrap`.
//!
//! Every tool works on the project root of its `path`: the nearest Git work tree containing
//! it, else the workspace ([`crate::primitives::project::project_root`]). What a root holds is
//! the [`engine`]'s: detection, the command manifest and aliases, the repository facts.
//! `run_command` runs a command's argv through the one-shot runner of `run_process`
//! ([`crate::tools::process::run`]): the same limits, tree kill, foreground budget, progress and
//! tasks.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use tokio_util::sync::CancellationToken;

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        error::ToolResult,
        text::{count, cut},
    },
    path::Workspace,
    policy::Capability,
    primitives::project::{project_root, target_dir},
    tools::{blocking::blocking, process::EXEC_HINTS},
};

mod commands;
mod engine;
mod overview;

use engine::{
    ProjectDir,
    detect::{Facts, detect},
    manifest::{Registry, registry},
    repo::RepoFacts,
};

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "project_overview",
                title: "Project overview",
                description: "Facts about the project containing path (the nearest git work tree, \
                              else the workspace): branch, head commit and dirty count; top-level \
                              entries; build systems and package managers with the file that \
                              decided each (Cargo, npm/pnpm/yarn/bun by lockfile, Python, Go, \
                              Make, CMake, Gradle, Maven) and their script, target or member \
                              names (never script bodies or dependencies); CI entry points; \
                              version-hint files (.nvmrc, rust-toolchain.toml, ...); docs; \
                              registered command names. detail \"summary\" (default): counts and \
                              the first names; \"full\": up to 512 of each. At most 16 KiB of text.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            overview::project_overview,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "list_commands",
                title: "List registered commands",
                description: "The commands run_command runs for the project containing path: \
                              those in .machine-mcp/commands.toml at the project root, and \
                              aliases npm.<script> (pnpm., yarn., bun. by lockfile) for \
                              package.json scripts, cargo.build/test/check/clippy for a Cargo \
                              project, make.<target> for makefile targets. Each with its argv, \
                              cwd, timeout, whether extra args are allowed and the file it came \
                              from; files that could not be used are listed as problems. Paged: \
                              pass next_offset as offset for more.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            commands::list_commands,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "run_command",
                title: "Run a registered command",
                description: "Run a command list_commands lists, by name: its argv without a \
                              shell, in its cwd, returning as run_process does (exit code, \
                              bounded stdout/stderr, max_output_bytes, timed_out, session_id \
                              after yield_after_seconds). args are appended only when the \
                              command allows extra arguments. timeout_seconds may lower the \
                              command's timeout, never raise it. Cancelling kills the process \
                              tree.",
                capability: Capability::ExecDirect,
                hints: EXEC_HINTS,
            },
            commands::run_command,
        )
        .larger_on_request(),
    ]
}

/// The default `path`: the workspace root.
fn dot() -> String {
    ".".to_owned()
}

/// Characters of [`facts_summary`].
pub(crate) const FACTS_SUMMARY_MAX_CHARS: usize = 2_000;
/// Command names [`facts_summary`] suggests.
const FACTS_COMMANDS: usize = 12;

/// The project a caller's `path` names.
struct Project {
    /// The target directory: `path` itself, or a file's directory (canonical).
    target: PathBuf,
    /// Its project root: the nearest git work tree containing it, else the workspace.
    root: PathBuf,
}

/// The project of the caller's `path` (a directory, or a file's directory).
///
/// # Errors
/// What [`Workspace::resolve`] returns; `not_found` when nothing is at `path`.
fn project_of(ws: &Workspace, path: &str) -> ToolResult<Project> {
    let target = target_dir(ws, path)?;
    let root = project_root(ws.root(), &target, ws.restricted());
    Ok(Project { target, root })
}

/// What the project tools read of a [`Project`].
struct Read {
    facts: Facts,
    reg: Registry,
    /// Project files between the root and the target, not read
    /// ([`engine::nested_project_files`]).
    nested: Vec<String>,
}

/// The facts and commands of `project`'s root, read off the async threads.
async fn read_project(rt: &Arc<Access>, project: &Project) -> ToolResult<Read> {
    let rt = rt.clone();
    let root = project.root.clone();
    let target = project.target.clone();
    blocking(move || {
        let ws = rt.workspace();
        let dir = ProjectDir::new(ws, &root);
        let facts = detect(&dir);
        let reg = registry(&dir, &facts);
        let nested = engine::nested_project_files(ws, &root, &target);
        Ok(Read { facts, reg, nested })
    })
    .await
}

/// What a text says of run_command to a caller whose policy `allowed` it or not.
fn run_hint(allowed: bool, can: &'static str) -> &'static str {
    if allowed { can } else { RUN_DENIED }
}

/// What the project tools say instead of inviting a caller without an exec mode to call
/// run_command (the commands are still listed).
const RUN_DENIED: &str = "run_command needs an exec mode this policy does not allow";

/// Characters of [`nested_note`].
const NESTED_NOTE_MAX_CHARS: usize = 1_000;

/// The note of a result whose `path` is below its project root, naming the project files on the
/// way that are not read (at most [`NESTED_NOTE_MAX_CHARS`]); empty when there are none.
fn nested_note(nested: &[String], root: &str) -> String {
    if nested.is_empty() {
        return String::new();
    }
    let note = format!(
        "facts and commands come from the project root only ({root}); not read: {}",
        nested.join(", ")
    );
    cut(note, NESTED_NOTE_MAX_CHARS, "…")
}

/// Lines written while they fit in a budget; a line that does not is cut and ends the text,
/// followed by a note.
struct Lines {
    text: String,
    room: usize,
    cut: bool,
    note: &'static str,
}

impl Lines {
    /// At most `limit` characters in all, `note` (one line) included when the text is cut.
    fn new(limit: usize, note: &'static str) -> Self {
        Self {
            text: String::new(),
            room: limit.saturating_sub(note.len() + 2),
            cut: false,
            note,
        }
    }

    fn push(&mut self, line: &str) {
        if self.cut {
            return;
        }
        let line = line.replace(['\n', '\r'], " ");
        if line.len() < self.room {
            self.text.push_str(&line);
            self.text.push('\n');
            self.room -= line.len() + 1;
            return;
        }
        self.text
            .push_str(&cut(line, self.room.saturating_sub(1), "…"));
        self.text.push('\n');
        self.cut = true;
    }

    fn finish(mut self) -> (String, bool) {
        if self.cut {
            self.text.push_str(self.note);
            self.text.push('\n');
        }
        (self.text, self.cut)
    }
}

// === session_bootstrap ===

/// A few lines about the project root `root` (canonical, from `project_root`) for
/// `session_bootstrap`: the repository's branch and dirty count, the build systems and package
/// managers with the file that decided each, and the registered command names to try (the
/// manifest's first, then common ones such as `cargo.test`). At most
/// [`FACTS_SUMMARY_MAX_CHARS`] characters.
///
/// Runs git through the git family's safe engine, then reads the project files on the blocking
/// pool. Never fails: what cannot be read is left out.
pub(crate) async fn facts_summary(access: Arc<Access>, root: PathBuf) -> String {
    let repo = engine::repo::facts(access.workspace(), &root, &CancellationToken::new()).await;
    blocking(move || Ok(summary_lines(&access, &root, repo)))
        .await
        .unwrap_or_default()
}

/// [`facts_summary`]'s text from the repository facts `repo` (blocking: reads project files).
fn summary_lines(access: &Access, root: &Path, repo: Result<Option<RepoFacts>, String>) -> String {
    let ws = access.workspace();
    let dir = ProjectDir::new(ws, root);
    let facts = detect(&dir);
    let reg = registry(&dir, &facts);
    let mut lines = Vec::new();
    match repo {
        Ok(Some(r)) => lines.push(format!("repository: {}", r.line())),
        Ok(None) => lines.push("repository: none".to_owned()),
        Err(_) => {}
    }
    if facts.build_systems.is_empty() {
        lines.push("build: none detected".to_owned());
    } else {
        let systems: Vec<String> = facts
            .build_systems
            .iter()
            .map(|b| format!("{} ({})", b.tool, b.decided_by))
            .collect();
        lines.push(format!("build: {}", systems.join(", ")));
    }
    if reg.total() > 0 {
        let common = [
            "test",
            "build",
            "check",
            "lint",
            "clippy",
            "fmt",
            "format",
            "typecheck",
        ];
        let is_common = |(name, _): &(String, bool)| {
            name.rsplit('.')
                .next()
                .is_some_and(|last| common.contains(&last))
        };
        let mut names: Vec<String> = reg
            .names()
            .filter(|(_, manifest)| *manifest)
            .chain(
                reg.names()
                    .filter(|(_, manifest)| !manifest)
                    .filter(is_common),
            )
            .map(|(name, _)| name)
            .take(FACTS_COMMANDS)
            .collect();
        if names.is_empty() {
            names = reg.names().map(|(n, _)| n).take(FACTS_COMMANDS).collect();
        }
        let total = reg.total();
        lines.push(if access.policy().allows(Capability::ExecDirect) {
            format!(
                "commands to try with run_command: {} ({total} in all; list_commands shows them)",
                names.join(", "),
            )
        } else {
            format!(
                "commands: {} ({total} in all; list_commands shows them; {RUN_DENIED})",
                names.join(", "),
            )
        });
    }
    let problems = facts.problems.len() + reg.problems.len();
    if problems > 0 {
        lines.push(format!(
            "{} (project_overview and list_commands name them)",
            count(
                problems as u64,
                "project file could not be used",
                "project files could not be used"
            )
        ));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    cut(text, FACTS_SUMMARY_MAX_CHARS, "…\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Runtime, RuntimeConfig,
        policy::{Policy, Profile},
    };

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// `session_bootstrap` calls it on a blocking-pool thread, which is inside the runtime:
    /// the git facts must still come (on a thread and runtime of their own).
    #[tokio::test]
    async fn the_facts_summary_names_the_branch_the_build_and_commands_to_try() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
        std::fs::write(
            root.join("package.json"),
            "{\"scripts\": {\"lint\": \"eslint\"}}",
        )
        .unwrap();
        std::fs::write(root.join("pnpm-lock.yaml"), "").unwrap();
        std::fs::create_dir(root.join(".machine-mcp")).unwrap();
        std::fs::write(
            root.join(".machine-mcp/commands.toml"),
            "[commands.ci]\ndescription = \"All checks\"\nargv = [\"make\", \"ci\"]\n",
        )
        .unwrap();
        git(&root, &["init", "-q", "-b", "trunk"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "one"]);
        std::fs::write(root.join("new.txt"), "").unwrap();
        let rt = Arc::new(
            Runtime::new(RuntimeConfig {
                workspace: root.clone(),
                policy: Policy::profile(Profile::Agent),
                default_yield_after: None,
                remote: false,
                state_dir: None,
                own_files: Vec::new(),
            })
            .unwrap(),
        );
        // A review caller is shown the commands, and told run_command is not for it.
        let text = facts_summary(rt.access(Some(Profile::Review)), root.clone()).await;
        assert!(
            text.contains(
                "commands: ci, cargo.build, cargo.test, cargo.check, cargo.clippy, pnpm.lint \
                 (6 in all; list_commands shows them; run_command needs an exec mode this \
                 policy does not allow)"
            ),
            "{text}"
        );
        let text = facts_summary(rt.access(None), root).await;
        assert!(text.len() <= FACTS_SUMMARY_MAX_CHARS);
        assert!(text.contains("branch trunk"), "{text}");
        assert!(text.contains("1 dirty path"), "{text}");
        assert!(
            text.contains("build: cargo (Cargo.toml), pnpm (pnpm-lock.yaml)"),
            "{text}"
        );
        assert!(
            text.contains(
                "run_command: ci, cargo.build, cargo.test, cargo.check, cargo.clippy, pnpm.lint"
            ),
            "{text}"
        );
    }
}
