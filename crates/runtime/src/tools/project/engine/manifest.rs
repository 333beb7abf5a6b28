//! Registered commands: the project manifest `.machine-mcp/commands.toml` and the automatic
//! aliases of the build systems [`super::detect`] found.
//!
//! ```toml
//! [commands.test]
//! description = "Unit tests"
//! argv = ["cargo", "test", "--workspace"]
//! cwd = "crates"            # optional, relative to the project root
//! timeout_seconds = 300     # optional, 1-600 (default 120)
//! allow_extra_args = true   # optional (default false)
//! ```
//!
//! The manifest fails closed: an unknown field (at the top or in a command), a missing or
//! mistyped one, or a value out of range makes the whole manifest unusable, with an error
//! naming the field and the command; the aliases still work. Aliases: `npm.<script>` (or
//! `pnpm.`/`yarn.`/`bun.`, as the lockfile decides) → `[manager, "run", script]` for each
//! `package.json` script; `cargo.build|test|check|clippy` → `["cargo", sub]` for a Cargo
//! project; `make.<target>` → `["make", target]` for each explicit makefile target. A manifest
//! command of the same name wins over an alias. Aliases run in the project root with the default
//! timeout and take extra arguments.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits::{
    COMMANDS_MAX, PROCESS_TIMEOUT_DEFAULT, PROCESS_TIMEOUT_MAX, PROCESS_TIMEOUT_MIN,
};

use crate::mcp::error::{ToolError, ToolErrorCode};

use super::{Problem, ProjectDir, detect::Facts, one_line, toml_error};

/// Where the manifest is, relative to the project root.
pub(crate) const MANIFEST: &str = ".machine-mcp/commands.toml";
/// Longest description kept, in bytes (shown on one line).
const DESCRIPTION_MAX_BYTES: usize = 1_000;
/// Subcommands of a Cargo project's aliases.
const CARGO_ALIASES: &[&str] = &["build", "test", "check", "clippy"];

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
            timeout_seconds: PROCESS_TIMEOUT_DEFAULT.as_secs(),
            allow_extra_args: true,
            source: "alias",
            provenance,
        }
    }
}

/// The commands of one project.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Manifest commands (in name order), then aliases (cargo, package.json, makefile); at
    /// most [`COMMANDS_MAX`].
    pub(crate) commands: Vec<Command>,
    /// Commands in all, also those past [`COMMANDS_MAX`].
    pub(crate) total: usize,
    /// The manifest, when it could not be used (also in `problems`); the aliases still work.
    pub(crate) manifest_error: Option<ToolError>,
    /// Files that could not be used, with why.
    pub(crate) problems: Vec<Problem>,
}

impl Registry {
    /// The command named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<&Command> {
        self.commands.iter().find(|c| c.name == name)
    }
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

/// The commands of a manifest's text (module docs), in name order; `provenance` is the
/// manifest's path as shown.
///
/// # Errors
/// One line naming the first problem: TOML syntax (with line and column), an unknown,
/// missing or mistyped field (with the command's table, `[commands.NAME]`), an invalid name,
/// an empty argv or one over the process limits, an absolute or empty cwd (or one with a
/// control character), a timeout outside 1-600, or more than [`COMMANDS_MAX`] commands.
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
            Some(c) if c.is_empty() || c.starts_with('/') || c.contains(char::is_control) => {
                let why = "cwd must be a non-empty path relative to the project root, without \
                           control characters";
                return Err(at(why.to_owned()));
            }
            Some(c) => c,
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
            timeout_seconds,
            allow_extra_args: spec.allow_extra_args,
            source: "manifest",
            provenance: provenance.to_owned(),
        });
    }
    Ok(out)
}

/// The commands of the project root `dir` whose facts are `facts` (module docs). Never fails:
/// a manifest that cannot be used is `manifest_error` and a problem.
pub(crate) fn registry(dir: &ProjectDir<'_>, facts: &Facts) -> Registry {
    let mut reg = Registry::default();
    let mut all: Vec<Command> = Vec::new();
    let shown = dir.display(MANIFEST);
    let failed = match dir.read_text(MANIFEST) {
        Ok(None) => None,
        Ok(Some(text)) => match parse_manifest(&text, &shown) {
            Ok(cmds) => {
                all.extend(cmds);
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
    let manifest_names: std::collections::HashSet<String> =
        all.iter().map(|c| c.name.clone()).collect();
    let mut aliases = Vec::new();
    if facts.system("cargo").is_some() {
        let from = dir.display("Cargo.toml");
        for sub in CARGO_ALIASES {
            aliases.push(Command::alias(
                format!("cargo.{sub}"),
                vec!["cargo".to_owned(), (*sub).to_owned()],
                format!("cargo {sub}"),
                from.clone(),
            ));
        }
    }
    if let Some(b) = facts
        .system("node")
        .filter(|b| b.names_kind == Some("scripts"))
    {
        let from = dir.display("package.json");
        for s in &b.names {
            aliases.push(Command::alias(
                format!("{}.{s}", b.tool),
                vec![b.tool.to_owned(), "run".to_owned(), s.clone()],
                format!("{} run {s} (package.json script)", b.tool),
                from.clone(),
            ));
        }
    }
    if let Some(b) = facts
        .system("make")
        .filter(|b| b.names_kind == Some("targets"))
    {
        let from = dir.display(&b.decided_by);
        for t in &b.names {
            aliases.push(Command::alias(
                format!("make.{t}"),
                vec!["make".to_owned(), t.clone()],
                format!("make {t} ({} target)", b.decided_by),
                from.clone(),
            ));
        }
    }
    all.extend(
        aliases
            .into_iter()
            .filter(|a| !manifest_names.contains(&a.name)),
    );
    reg.total = all.len();
    all.truncate(COMMANDS_MAX);
    reg.commands = all;
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
}
