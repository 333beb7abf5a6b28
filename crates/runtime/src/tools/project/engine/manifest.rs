//! Registered commands: the project manifest `.machine-mcp/commands.toml` and the automatic
//! aliases of the build systems [`super::detect`] found.
//!
//! ```toml
//! [commands.test]
//! description = "Unit tests"   # required, one line
//! argv = ["cargo", "test", "--workspace"]   # required, run without a shell
//! cwd = "crates"            # optional (default "."), relative to the project root
//! timeout_seconds = 300     # optional, 1-600 (default 120)
//! allow_extra_args = true   # optional (default false)
//! ```
//!
//! The manifest fails closed: an unknown field (at the top or in a command), a missing or
//! mistyped one, a value out of range, a `cwd` that leaves the project root by its text
//! (absolute, or with a `..` component), or more than [`COMMANDS_MAX`] commands makes the whole
//! manifest unusable, with an error naming the field and the command; the aliases still work.
//! A `cwd` that is valid text but that this caller cannot use (a symlink out of the workspace
//! for a confined caller, missing, not a directory) is the command's `cwd_problem` and a
//! [`Problem`]: the command is still listed, and `run_command` refuses it with the same reason.
//!
//! Aliases: `npm.<script>` (or `pnpm.`/`yarn.`/`bun.`, as the lockfile decides) →
//! `[manager, "run", script]` for each `package.json` script; `cargo.build|test|check|clippy` →
//! `["cargo", sub]` for a Cargo project; `make.<target>` → `["make", target]` for each explicit
//! makefile target. A script or target whose name starts with `-` gets no alias (the tool would
//! read it as its own option): a [`Problem`] names them. A manifest command of the same name wins
//! over an alias. Aliases run in the project root with the default timeout and take extra
//! arguments. Every alias of the files read is kept (the files are bounded by
//! `PROJECT_FILE_MAX_BYTES`), so each is runnable by name; aliases are made one at a time as
//! they are listed or found, never all at once.

use std::{
    collections::{BTreeMap, HashSet},
    path::{Component, Path},
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    COMMANDS_MAX, PROCESS_TIMEOUT_DEFAULT, PROCESS_TIMEOUT_MAX, PROCESS_TIMEOUT_MIN,
};

use crate::call::error::{ToolError, ToolErrorCode};

use super::{Problem, ProjectDir, detect::Facts, one_line, toml_error};

/// Where the manifest is, relative to the project root.
pub(crate) const MANIFEST: &str = ".machine-mcp/commands.toml";
/// Longest description kept, in bytes (shown on one line).
const DESCRIPTION_MAX_BYTES: usize = 1_000;
/// Subcommands of a Cargo project's aliases.
const CARGO_ALIASES: &[&str] = &["build", "test", "check", "clippy"];
/// Names an alias can have start with one of these (`npm.build`, `make.all`).
const ALIAS_PREFIXES: &[&str] = &["cargo.", "npm.", "pnpm.", "yarn.", "bun.", "make."];
/// Names starting with `-` a problem quotes; the rest are counted.
const DASH_NAMES_SHOWN: usize = 5;

/// The manifest file's shape: one table, `commands`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    #[serde(default)]
    commands: BTreeMap<String, toml::Value>,
}

/// One `[commands.NAME]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandSpec {
    description: String,
    argv: Vec<String>,
    cwd: Option<String>,
    timeout_seconds: Option<u64>,
    #[serde(default)]
    allow_extra_args: bool,
}

/// A command `run_command` can run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct Command {
    /// The name run_command takes.
    pub(crate) name: String,
    /// What it does (one line).
    pub(crate) description: String,
    /// Program and arguments, run without a shell.
    pub(crate) argv: Vec<String>,
    /// Working directory, relative to the project root ("." for the root).
    pub(crate) cwd: String,
    /// Why this caller cannot use cwd (it resolves outside the workspace, is missing or is not
    /// a directory): run_command refuses the command with this reason. Absent when it can run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cwd_problem: Option<String>,
    /// Seconds before its process tree is terminated; a caller may lower it, never raise it.
    pub(crate) timeout_seconds: u64,
    /// Whether run_command appends a caller's args.
    pub(crate) allow_extra_args: bool,
    /// manifest or alias.
    pub(crate) source: &'static str,
    /// The file that registered it (the manifest, package.json, Cargo.toml or the makefile),
    /// as paths are shown.
    pub(crate) provenance: String,
}

impl Command {
    fn alias(name: String, argv: Vec<String>, description: String, provenance: String) -> Self {
        Self {
            name,
            description,
            argv,
            cwd: ".".to_owned(),
            cwd_problem: None,
            timeout_seconds: PROCESS_TIMEOUT_DEFAULT.as_secs(),
            allow_extra_args: true,
            source: "alias",
            provenance,
        }
    }
}

/// What an alias group's names are.
#[derive(Debug)]
enum AliasKind {
    /// Cargo subcommands: `cargo.<sub>` → `cargo <sub>`.
    Cargo,
    /// package.json scripts: `<manager>.<script>` → `<manager> run <script>`.
    Script,
    /// Makefile targets: `make.<target>` → `make <target>`; the makefile's name.
    Target(String),
}

/// The aliases of one file: the prefix's program and the names after it.
#[derive(Debug)]
struct Aliases {
    /// cargo; npm, pnpm, yarn or bun; make.
    tool: &'static str,
    kind: AliasKind,
    /// Subcommands, scripts or targets, in the file's order; none a manifest command shadows.
    names: Vec<String>,
    /// The file they come from, as paths are shown.
    provenance: String,
}

impl Aliases {
    /// The alias of `name` (one of `self.names`).
    fn command(&self, name: &str) -> Command {
        let tool = self.tool.to_owned();
        let (argv, description) = match &self.kind {
            AliasKind::Cargo => (vec![tool, name.to_owned()], format!("cargo {name}")),
            AliasKind::Script => (
                vec![tool, "run".to_owned(), name.to_owned()],
                format!("{} run {name} (package.json script)", self.tool),
            ),
            AliasKind::Target(makefile) => (
                vec![tool, name.to_owned()],
                format!("make {name} ({makefile} target)"),
            ),
        };
        Command::alias(
            format!("{}.{name}", self.tool),
            argv,
            description,
            self.provenance.clone(),
        )
    }
}

/// One command of a [`Registry`], not made yet.
#[derive(Debug, Clone, Copy)]
enum Entry<'a> {
    Manifest(&'a Command),
    Alias(&'a Aliases, &'a str),
}

impl Entry<'_> {
    fn command(self) -> Command {
        match self {
            Entry::Manifest(c) => c.clone(),
            Entry::Alias(a, name) => a.command(name),
        }
    }
}

/// The commands of one project: every manifest command, then every alias (cargo,
/// package.json, makefile), each name once.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Manifest commands, in name order (at most [`COMMANDS_MAX`]).
    manifest: Vec<Command>,
    /// Alias groups, in the order cargo, package.json, makefile.
    aliases: Vec<Aliases>,
    /// The manifest, when it could not be used (also in `problems`); the aliases still work.
    pub(crate) manifest_error: Option<ToolError>,
    /// Files (and manifest commands) that could not be used, with why.
    pub(crate) problems: Vec<Problem>,
}

impl Registry {
    /// Commands in all.
    pub(crate) fn total(&self) -> usize {
        self.manifest.len() + self.aliases.iter().map(|a| a.names.len()).sum::<usize>()
    }

    fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.manifest.iter().map(Entry::Manifest).chain(
            self.aliases
                .iter()
                .flat_map(|a| a.names.iter().map(move |n| Entry::Alias(a, n))),
        )
    }

    /// The commands from index `offset` (0-based) on, in the registry's order (manifest, then
    /// aliases), each made as it is taken.
    pub(crate) fn commands_from(&self, offset: usize) -> impl Iterator<Item = Command> + '_ {
        self.entries().skip(offset).map(Entry::command)
    }

    /// Every command's name in the registry's order, with whether it is the manifest's.
    pub(crate) fn names(&self) -> impl Iterator<Item = (String, bool)> + '_ {
        self.entries().map(|e| match e {
            Entry::Manifest(c) => (c.name.clone(), true),
            Entry::Alias(a, n) => (format!("{}.{n}", a.tool), false),
        })
    }

    /// The command named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<Command> {
        if let Some(c) = self.manifest.iter().find(|c| c.name == name) {
            return Some(c.clone());
        }
        self.aliases.iter().find_map(|a| {
            let rest = name.strip_prefix(a.tool)?.strip_prefix('.')?;
            a.names.iter().any(|n| n == rest).then(|| a.command(rest))
        })
    }
}

/// Whether `name` has the shape of an alias (`npm.x`, `make.x`, ...): a name the registry
/// would have as an alias if the project had that script or target.
pub(crate) fn alias_shaped(name: &str) -> bool {
    ALIAS_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `name` can name a manifest command: 1-200 bytes of ASCII letters, digits and
/// `. _ - : + @ /`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= super::NAME_MAX_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:+@/".contains(&b))
}

/// Whether `cwd` is a manifest cwd by its text: not empty, relative, no `..` component (it
/// stays below the project root before any symlink is followed), no control characters.
fn valid_cwd(cwd: &str) -> bool {
    let p = Path::new(cwd);
    !cwd.is_empty()
        && !p.is_absolute()
        && !cwd.contains(char::is_control)
        && !p.components().any(|c| c == Component::ParentDir)
}

/// The commands of a manifest's text (module docs), in name order; `provenance` is the
/// manifest's path as shown. `cwd_problem` is not set (it depends on the caller: [`registry`]).
///
/// # Errors
/// One line naming the first problem: TOML syntax (with line and column), an unknown,
/// missing or mistyped field (with the command's table, `[commands.NAME]`), an invalid name,
/// an empty argv or one over the process limits, a cwd that is empty, absolute, has a `..`
/// component or a control character, a timeout outside 1-600, or more than [`COMMANDS_MAX`]
/// commands.
pub(crate) fn parse_manifest(text: &str, provenance: &str) -> Result<Vec<Command>, String> {
    let file: ManifestFile = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    if file.commands.len() > COMMANDS_MAX {
        return Err(format!(
            "{} commands; a manifest may have at most {COMMANDS_MAX}",
            file.commands.len()
        ));
    }
    let mut out = Vec::with_capacity(file.commands.len());
    for (name, value) in file.commands {
        let shown = if valid_name(&name) {
            name.clone()
        } else {
            format!("{:?}", one_line(&name, super::NAME_MAX_BYTES))
        };
        let at = |m: String| format!("[commands.{shown}]: {m}");
        if !valid_name(&name) {
            return Err(at(format!(
                "invalid name: 1-{} bytes of ASCII letters, digits and . _ - : + @ /",
                super::NAME_MAX_BYTES
            )));
        }
        let spec: CommandSpec = value
            .try_into()
            .map_err(|e: toml::de::Error| at(e.message().trim().replace('\n', " ")))?;
        crate::tools::process::engine::check_argv(&spec.argv)
            .map_err(|e| at(format!("argv: {}", e.message())))?;
        let cwd = match spec.cwd {
            None => ".".to_owned(),
            Some(c) if valid_cwd(&c) => c,
            Some(_) => {
                let why = "cwd must be a relative path below the project root: not empty, not \
                           absolute, no `..` component, no control characters";
                return Err(at(why.to_owned()));
            }
        };
        let range = PROCESS_TIMEOUT_MIN.as_secs()..=PROCESS_TIMEOUT_MAX.as_secs();
        let timeout_seconds = match spec.timeout_seconds {
            None => PROCESS_TIMEOUT_DEFAULT.as_secs(),
            Some(t) if range.contains(&t) => t,
            Some(t) => {
                return Err(at(format!(
                    "timeout_seconds {t} is outside {}-{}",
                    range.start(),
                    range.end()
                )));
            }
        };
        out.push(Command {
            name,
            description: one_line(&spec.description, DESCRIPTION_MAX_BYTES),
            argv: spec.argv,
            cwd,
            cwd_problem: None,
            timeout_seconds,
            allow_extra_args: spec.allow_extra_args,
            source: "manifest",
            provenance: provenance.to_owned(),
        });
    }
    Ok(out)
}

/// The commands of the project root `dir` whose facts are `facts` (module docs), for the
/// caller `dir` reads as. Never fails: a manifest that cannot be used is `manifest_error` and a
/// problem; a manifest command whose cwd this caller cannot use has `cwd_problem` and a
/// problem; names starting with `-` are a problem of their file.
pub(crate) fn registry(dir: &ProjectDir<'_>, facts: &Facts) -> Registry {
    let mut reg = Registry::default();
    let shown = dir.display(MANIFEST);
    let failed = match dir.read_text(MANIFEST) {
        Ok(None) => None,
        Ok(Some(text)) => match parse_manifest(&text, &shown) {
            Ok(cmds) => {
                reg.manifest = cmds;
                None
            }
            Err(m) => Some((ToolErrorCode::InvalidRequest, m)),
        },
        Err(e) if e.too_large => Some((ToolErrorCode::LimitExceeded, e.message)),
        Err(e) => Some((ToolErrorCode::InvalidRequest, e.message)),
    };
    if let Some((code, message)) = failed {
        let message = format!("{message}; none of its commands can run (the aliases can)");
        reg.problems.push(dir.problem(MANIFEST, message.clone()));
        reg.manifest_error = Some(
            ToolError::new(code, format!("the command manifest {shown}: {message}"))
                .detail("path", shown.clone()),
        );
    }
    for c in &mut reg.manifest {
        if c.cwd == "." {
            continue;
        }
        c.cwd_problem = dir.dir_error(&c.cwd).map(|e| e.message().to_owned());
        if let Some(why) = &c.cwd_problem {
            reg.problems.push(dir.problem(
                MANIFEST,
                format!(
                    "[commands.{}]: cwd {why}; run_command refuses this command (it is \
                     listed, with cwd_problem)",
                    c.name
                ),
            ));
        }
    }
    let shadowed: HashSet<&str> = reg.manifest.iter().map(|c| c.name.as_str()).collect();
    let mut groups = Vec::new();
    if facts.system("cargo").is_some() {
        groups.push(Aliases {
            tool: "cargo",
            kind: AliasKind::Cargo,
            names: CARGO_ALIASES.iter().map(|s| (*s).to_owned()).collect(),
            provenance: dir.display("Cargo.toml"),
        });
    }
    if let Some(b) = facts
        .system("node")
        .filter(|b| b.names_kind == Some("scripts"))
    {
        groups.push(Aliases {
            tool: b.tool,
            kind: AliasKind::Script,
            names: b.names.clone(),
            provenance: dir.display("package.json"),
        });
    }
    if let Some(b) = facts
        .system("make")
        .filter(|b| b.names_kind == Some("targets"))
    {
        groups.push(Aliases {
            tool: "make",
            kind: AliasKind::Target(b.decided_by.clone()),
            names: b.names.clone(),
            provenance: dir.display(&b.decided_by),
        });
    }
    for mut g in groups {
        let (dashed, names): (Vec<String>, Vec<String>) =
            g.names.into_iter().partition(|n| n.starts_with('-'));
        if !dashed.is_empty() {
            let (one, many) = match g.kind {
                AliasKind::Target(_) => ("target starts", "targets start"),
                _ => ("script starts", "scripts start"),
            };
            let mut quoted: Vec<String> = dashed
                .iter()
                .take(DASH_NAMES_SHOWN)
                .map(|n| format!("{n:?}"))
                .collect();
            if dashed.len() > DASH_NAMES_SHOWN {
                quoted.push(format!("and {} more", dashed.len() - DASH_NAMES_SHOWN));
            }
            reg.problems.push(Problem {
                path: g.provenance.clone(),
                message: format!(
                    "{} {} with \"-\" and {} no alias ({} would take such a name for its own \
                     option): {}",
                    dashed.len(),
                    if dashed.len() == 1 { one } else { many },
                    if dashed.len() == 1 { "has" } else { "have" },
                    g.tool,
                    quoted.join(", ")
                ),
            });
        }
        g.names = names
            .into_iter()
            .filter(|n| !shadowed.contains(format!("{}.{n}", g.tool).as_str()))
            .collect();
        reg.aliases.push(g);
    }
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_manifest_is_read_with_its_defaults() {
        let cmds = parse_manifest(
            r#"
[commands.lint]
description = "Lint"
argv = ["cargo", "clippy"]

[commands."ci:full"]
description = "Everything"
argv = ["sh", "-c", "make ci"]
cwd = "tools"
timeout_seconds = 600
allow_extra_args = true
"#,
            ".machine-mcp/commands.toml",
        )
        .unwrap();
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0].name, "ci:full");
        assert_eq!(
            (
                cmds[0].cwd.as_str(),
                cmds[0].timeout_seconds,
                cmds[0].allow_extra_args
            ),
            ("tools", 600, true)
        );
        assert_eq!(
            (
                cmds[1].cwd.as_str(),
                cmds[1].timeout_seconds,
                cmds[1].allow_extra_args
            ),
            (".", 120, false)
        );
        assert_eq!(cmds[0].source, "manifest");
        assert!(parse_manifest("", "m").unwrap().is_empty());
    }

    #[test]
    fn every_invalid_manifest_fails_closed_naming_what_is_wrong() {
        let cmd = "[commands.t]\ndescription = \"d\"\nargv = [\"x\"]\n";
        for (text, needle) in [
            (
                format!("{cmd}timeout = 5\n"),
                "[commands.t]: unknown field `timeout`",
            ),
            (format!("comands = 1\n{cmd}"), "unknown field `comands`"),
            (
                "[commands.t]\nargv = [\"x\"]\n".to_owned(),
                "missing field `description`",
            ),
            (
                "[commands.t]\ndescription = \"d\"\nargv = []\n".to_owned(),
                "argv",
            ),
            (
                "[commands.t]\ndescription = \"d\"\nargv = \"x\"\n".to_owned(),
                "[commands.t]: invalid type",
            ),
            (
                format!("{cmd}timeout_seconds = 601\n"),
                "timeout_seconds 601",
            ),
            (format!("{cmd}timeout_seconds = 0\n"), "timeout_seconds 0"),
            (format!("{cmd}cwd = \"/etc\"\n"), "cwd must be"),
            (
                format!("{cmd}cwd = \"../..\"\n"),
                "[commands.t]: cwd must be",
            ),
            (
                format!("{cmd}cwd = \"sub/../../x\"\n"),
                "[commands.t]: cwd must be",
            ),
            (format!("{cmd}cwd = \"\"\n"), "[commands.t]: cwd must be"),
            (
                "[commands.\"a b\"]\ndescription = \"d\"\nargv = [\"x\"]\n".to_owned(),
                "[commands.\"a b\"]: invalid name",
            ),
            ("[commands.t\n".to_owned(), "line 1, column"),
        ] {
            let e = parse_manifest(&text, "m").unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    /// Every alias is kept past [`COMMANDS_MAX`] and found by name; a manifest name shadows
    /// its alias; names starting with `-` get none.
    #[test]
    fn the_registry_keeps_every_alias_and_finds_each_by_name() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let makefile: String = (0..COMMANDS_MAX + 100)
            .map(|i| format!("t{i}:\n"))
            .chain(["-n:\n".to_owned()])
            .collect();
        std::fs::write(root.join("Makefile"), makefile).unwrap();
        std::fs::create_dir(root.join(".machine-mcp")).unwrap();
        std::fs::write(
            root.join(MANIFEST),
            "[commands.\"make.t1\"]\ndescription = \"d\"\nargv = [\"true\"]\n",
        )
        .unwrap();
        let ws = crate::path::Workspace::new(&root, true, false).unwrap();
        let dir = ProjectDir::new(&ws, &root);
        let reg = registry(&dir, &crate::tools::project::engine::detect::detect(&dir));
        assert_eq!(reg.total(), COMMANDS_MAX + 100);
        let last = format!("make.t{}", COMMANDS_MAX + 99);
        assert_eq!(reg.find(&last).unwrap().argv[1], last["make.".len()..]);
        assert_eq!(reg.find("make.t1").unwrap().source, "manifest");
        assert!(reg.find("make.-n").is_none());
        let names: Vec<String> = reg.names().map(|(n, _)| n).collect();
        assert_eq!(names.len(), reg.total());
        assert_eq!(names.iter().filter(|n| *n == "make.t1").count(), 1);
        assert_eq!(reg.commands_from(reg.total() - 1).count(), 1);
        assert!(reg.problems.iter().any(|p| p.message.contains("\"-n\"")));
    }
}
