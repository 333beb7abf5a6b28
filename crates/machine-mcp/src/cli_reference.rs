//! The CLI reference, `docs/reference/cli.md`, rendered from clap's own definitions so that it
//! says what `--help` says and cannot drift from it.
//!
//! Rules of the rendering:
//! - Hidden commands, options and values are left out (they are for tests and internal use).
//! - Global options (`--log-level`, `-v`, `--log-file`) are listed once, under the top command;
//!   `-h`/`--help` and `-V`/`--version` are said once in the introduction.
//! - Texts are the long help of `--help`, unwrapped (Markdown wraps them); options are grouped
//!   under their help heading, as `--help` groups them.
//! - Nothing depends on the machine: no version, no terminal width, no environment value (only
//!   the names of the variables an option reads). `tests/tidy.rs` compares the output with the
//!   committed file, so the same sources always give the same bytes.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

/// The hidden subcommand that prints the reference (`machine-mcp internal-cli-reference`).
pub(crate) const SUBCOMMAND: &str = "internal-cli-reference";

/// How to regenerate the committed file, said at its top.
const REGENERATE: &str = "MACHINE_MCP_BLESS=1 cargo test -p machine-mcp --test tidy cli_reference";

/// The whole reference as Markdown, without a final line break (`outln!` adds it).
pub(crate) fn render() -> String {
    let mut root = crate::cli::Cli::command().bin_name("machine-mcp");
    // Resolves global options into every subcommand and gives each its full name
    // (`machine-mcp relay serve`), as parsing would.
    root.build();
    let mut out = String::new();
    let name = root.get_name().to_owned();
    let _ = writeln!(
        out,
        "# `{name}` command-line reference\n\n\
         Generated from the command definitions: do not edit by hand. After changing a command \
         or its help, regenerate it with `{REGENERATE}`.\n\n\
         Every command also takes `-h` (a summary) or `--help` (this text), `-V`/`--version`, \
         and the [global options](#{name}). What the commands are for, with examples: the \
         [README](../../README.md) and the guides in [docs/](..)."
    );
    out.push_str("\n## Commands\n\n");
    contents(&root, 0, &mut out);
    command(&root, true, &mut out);
    // Sections end with a blank line and start with one: keep one.
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Visible subcommands, without clap's generated `help`.
fn visible(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// The full name of `cmd` (`machine-mcp relay serve`).
fn full_name(cmd: &Command) -> &str {
    cmd.get_bin_name().unwrap_or(cmd.get_name())
}

/// GitHub's anchor of a heading that is `full_name` in backticks.
fn anchor(full_name: &str) -> String {
    full_name.replace(' ', "-")
}

/// A nested list of links to every command.
fn contents(cmd: &Command, depth: usize, out: &mut String) {
    let name = full_name(cmd);
    let _ = writeln!(out, "{}- [`{name}`](#{})", "  ".repeat(depth), anchor(name));
    for sub in visible(cmd) {
        contents(sub, depth + 1, out);
    }
}

/// One command's section, then its subcommands'. The root's section lists the global options;
/// the others leave them out.
fn command(cmd: &Command, is_root: bool, out: &mut String) {
    let name = full_name(cmd);
    let _ = writeln!(out, "\n## `{name}`\n");
    if let Some(text) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", sentence(&text.to_string()));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
    let _ = writeln!(out, "```text\n{usage}\n```\n");

    let subs: Vec<&Command> = visible(cmd).collect();
    if !subs.is_empty() {
        out.push_str("| command | what it does |\n|---|---|\n");
        for sub in &subs {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "| [`{}`](#{}) | {} |",
                sub.get_name(),
                anchor(full_name(sub)),
                sentence(&about).replace('|', "\\|")
            );
        }
        out.push('\n');
    }

    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| shown(a) && a.is_global_set() == is_root)
        .collect();
    let positionals: Vec<&Arg> = args.iter().copied().filter(|a| a.is_positional()).collect();
    if !positionals.is_empty() {
        out.push_str("Arguments:\n\n");
        for a in positionals {
            arg(a, out);
        }
        out.push('\n');
    }
    // Options in the order `--help` shows them, grouped under their headings.
    let mut headings: Vec<Option<&str>> = Vec::new();
    for a in args.iter().filter(|a| !a.is_positional()) {
        if !headings.contains(&a.get_help_heading()) {
            headings.push(a.get_help_heading());
        }
    }
    for heading in headings {
        let title = match heading {
            Some(h) => h,
            None if is_root => "Global options (every command takes them)",
            None => "Options",
        };
        let _ = writeln!(out, "{title}:\n");
        for a in args
            .iter()
            .filter(|a| !a.is_positional() && a.get_help_heading() == heading)
        {
            arg(a, out);
        }
        out.push('\n');
    }
    for sub in subs {
        command(sub, false, out);
    }
}

/// Whether an argument belongs in the reference: not hidden, not clap's help or version flag.
fn shown(a: &Arg) -> bool {
    !a.is_hide_set()
        && !matches!(
            a.get_action(),
            ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
        )
}

/// One argument as a list item: its forms, its help, then its default, values and variable.
fn arg(a: &Arg, out: &mut String) {
    // clap's own rendering of the form: `--workspace <DIR>`, `--full-env[=<BOOL>]`, `<PLAN>`.
    let form = a.to_string();
    let forms = match (a.get_short(), a.get_long()) {
        (Some(s), Some(_)) => format!("`-{s}`, `{form}`"),
        _ => format!("`{form}`"),
    };
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| sentence(&h.to_string()))
        .unwrap_or_default();
    let mut notes = Vec::new();
    // A positional's form already says whether it is required (`<NAME>` or `[NAME]`).
    if a.is_required_set() && !a.is_positional() {
        notes.push("Required.".to_owned());
    }
    if matches!(a.get_action(), ArgAction::Append) && !help.to_lowercase().contains("repeatable") {
        notes.push("Repeatable.".to_owned());
    }
    let takes_values = a.get_action().takes_values();
    if takes_values && !a.is_hide_default_value_set() && !a.get_default_values().is_empty() {
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        notes.push(format!("Default: {}.", defaults.join(", ")));
    }
    if let Some(env) = a.get_env().filter(|_| !a.is_hide_env_set()) {
        notes.push(format!("Environment: `{}`.", env.to_string_lossy()));
    }
    let values: Vec<_> = if takes_values && !a.is_hide_possible_values_set() {
        a.get_possible_values()
            .into_iter()
            .filter(|v| !v.is_hide_set())
            .collect()
    } else {
        Vec::new()
    };
    let described = values.iter().any(|v| v.get_help().is_some());
    if !values.is_empty() && !described {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        notes.push(format!("Values: {}.", names.join(", ")));
    }
    let mut line = format!("- {forms}: {help}");
    for note in notes {
        line.push(' ');
        line.push_str(&note);
    }
    let _ = writeln!(out, "{}", line.trim_end());
    if described {
        for v in values {
            let help = v
                .get_help()
                .map(|h| format!(": {}", sentence(&h.to_string())))
                .unwrap_or_default();
            let _ = writeln!(out, "  - `{}`{help}", v.get_name());
        }
    }
}

/// `text` with its paragraphs kept and a full stop at its end (clap drops the final one of a
/// one-paragraph doc comment).
fn sentence(text: &str) -> String {
    let text = text.trim();
    match text.chars().last() {
        None => String::new(),
        Some('.' | '!' | '?' | ':') => text.to_owned(),
        Some(_) => format!("{text}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_commands_and_options_stay_out() {
        let md = render();
        for hidden in [
            "job-runner",
            "internal-watchdog",
            "worker-mcp",
            SUBCOMMAND,
            "--worker",
            "--heartbeat-ms",
            "--oauth-insecure-client-documents",
            "--ignore-sigterm-for-tests",
            "--platform",
        ] {
            assert!(
                !md.contains(&format!("`{hidden}")) && !md.contains(&format!("{hidden}`")),
                "{hidden} is hidden yet in the reference"
            );
        }
        assert!(md.contains("## `machine-mcp relay serve`"));
        assert!(md.contains("`--full-env[=<BOOL>]`"));
    }

    #[test]
    fn global_options_are_listed_once() {
        let md = render();
        assert_eq!(md.matches("- `--log-file <FILE>`").count(), 1);
        assert_eq!(md.matches("- `-v`, `--verbose`").count(), 1);
    }

    #[test]
    fn sentences_end_once() {
        assert_eq!(sentence("Forbid every write"), "Forbid every write.");
        assert_eq!(sentence("Done."), "Done.");
        assert_eq!(sentence("  "), "");
    }
}
