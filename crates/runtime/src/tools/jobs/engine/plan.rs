//! A job plan: its shape (the arguments of `start_job` and `stage_job`, and the file of
//! `machine-mcp job submit`), its validation at acceptance, and its canonical hash.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    JOB_DEPENDS_MAX, JOB_FINALLY_STEPS_MAX, JOB_PLAN_MAX_BYTES, JOB_STDIN_MAX_BYTES,
    JOB_STEP_ENV_MAX_BYTES, JOB_STEP_TIMEOUT_MAX, JOB_STEPS_MAX, JOB_TEMP_FILES_MAX,
    JOB_TEMP_FILES_MAX_BYTES,
};

use crate::{
    call::error::{ToolError, ToolErrorCode, ToolResult},
    path::Workspace,
    policy::ExecMode,
    primitives::text::sha256_hex,
    tools::{
        process::engine::env,
        resources::engine::{self as resources, Entry, Validity},
    },
};

/// A job plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// A short name for people (1-128 characters).
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Names this submission: the same key with the same plan returns the existing job
    /// (idempotency_replay), with a different plan is a conflict. Pattern
    /// `^[A-Za-z0-9][A-Za-z0-9._~:-]{0,127}$`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._~:-]{0,127}$"))]
    pub idempotency_key: String,
    /// The steps, run in order; the first failing one (unless allow_failure) ends them (1-16).
    #[schemars(length(min = 1, max = 16))]
    pub steps: Vec<Step>,
    /// Cleanup steps, run after the steps end however they end (success, failure, timeout,
    /// cancellation), and again after a crash (0-16).
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub finally_steps: Vec<Step>,
    /// Files written privately (0600) for the job, by name (at most 16, 512 KiB in all); a step
    /// names one's path with {{temp:NAME}}.
    #[serde(default)]
    pub temporary_files: BTreeMap<String, String>,
    /// Job ids this job waits for; it fails as dependency_failed unless they all succeed.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub depends_on: Vec<String>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Program and arguments (no shell). With shell: true, exactly one entry: a command line
    /// for /bin/sh -c. May hold {{temp:NAME}}, {{resource:ALIAS}}, {{job:workspace}}.
    pub argv: Vec<String>,
    /// Run the one argv entry as a /bin/sh -c command line (only when the exec mode is shell).
    #[serde(default)]
    pub shell: bool,
    /// Working directory relative to the workspace (default: its root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment variables to add (values may hold placeholders).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables that hold a local resource's bytes (one trailing newline removed), by alias.
    #[serde(default)]
    pub env_resources: BTreeMap<String, String>,
    /// Text written to stdin (at most 256 KiB).
    #[serde(default)]
    pub stdin: Option<String>,
    /// A local resource whose bytes are written to stdin (instead of stdin).
    #[serde(default)]
    pub stdin_resource: Option<String>,
    /// Seconds before the step's process tree is terminated: 1-21600, default 600.
    #[serde(default)]
    #[schemars(range(min = 1, max = 21600))]
    pub timeout_seconds: Option<u64>,
    /// A failing exit or a timeout does not fail the job.
    #[serde(default)]
    pub allow_failure: bool,
    /// redacted (default: head and tail kept, resources redacted) or discard.
    #[serde(default)]
    pub capture_output: Capture,
}

/// What is kept of a step's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Capture {
    /// Head and tail, with every resource redacted.
    #[default]
    Redacted,
    /// Nothing.
    Discard,
}

/// A placeholder in an argv entry or environment value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Placeholder {
    /// `{{temp:NAME}}`.
    Temp(String),
    /// `{{resource:ALIAS}}`.
    Resource(String),
    /// `{{job:workspace}}`.
    Workspace,
}

/// A text split into literal parts and placeholders.
pub(crate) fn parse_placeholders(s: &str) -> Result<Vec<Result<&str, Placeholder>>, String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(k) = rest.find("{{") {
        if k > 0 {
            out.push(Ok(&rest[..k]));
        }
        let after = &rest[k + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("{s:?}: \"{{{{\" without a closing \"}}}}\""))?;
        let inner = &after[..end];
        let p = match inner.split_once(':') {
            Some(("temp", n)) => Placeholder::Temp(n.to_owned()),
            Some(("resource", a)) => Placeholder::Resource(a.to_owned()),
            Some(("job", "workspace")) => Placeholder::Workspace,
            _ => {
                return Err(format!(
                    "unknown placeholder {{{{{inner}}}}} (known: {{{{temp:NAME}}}}, \
                     {{{{resource:ALIAS}}}}, {{{{job:workspace}}}})"
                ));
            }
        };
        out.push(Err(p));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        out.push(Ok(rest));
    }
    Ok(out)
}

/// Whether `key` matches `^[A-Za-z0-9][A-Za-z0-9._~:-]{0,127}$`.
pub(crate) fn valid_key(key: &str) -> bool {
    let b = key.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._~:-".contains(c))
}

/// Whether `name` is a valid temporary file name: `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`.
fn valid_temp_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
}

/// What a plan is checked against when it is accepted: the caller's authority and the machine.
pub(crate) struct Checks<'a> {
    /// The caller's exec mode.
    pub(crate) exec_mode: ExecMode,
    /// The caller's workspace and path rules.
    pub(crate) workspace: &'a Workspace,
    /// The registered resources.
    pub(crate) resources: &'a BTreeMap<String, Entry>,
}

/// What validation found: each step's working directory (main steps, then finally steps) and
/// the resources the plan uses.
#[derive(Debug)]
pub(crate) struct Validated {
    pub(crate) cwds: Vec<PathBuf>,
    pub(crate) resources: BTreeMap<String, Entry>,
}

fn invalid(msg: impl Into<String>) -> ToolError {
    ToolError::invalid(msg)
}

/// Validates the whole plan; the first problem refuses it, naming the field.
///
/// # Errors
/// `invalid_request` for a bound, pattern, placeholder, unknown temporary file or resource
/// alias; `policy_denied` for a shell step without exec mode `shell` or a plan without exec;
/// `path_boundary` for a `cwd` outside the caller's paths; `unavailable` for a resource that is
/// not valid now (missing, changed, insecure).
pub(crate) fn validate(plan: &Plan, checks: &Checks<'_>) -> ToolResult<Validated> {
    if checks.exec_mode < ExecMode::Direct {
        return Err(ToolError::new(
            ToolErrorCode::PolicyDenied,
            "jobs run programs: the exec mode is off",
        ));
    }
    let name_chars = plan.name.chars().count();
    if name_chars == 0 || name_chars > 128 || plan.name.chars().any(char::is_control) {
        return Err(invalid(
            "name must be 1-128 characters without control characters",
        ));
    }
    if !valid_key(&plan.idempotency_key) {
        return Err(invalid(
            "idempotency_key must match ^[A-Za-z0-9][A-Za-z0-9._~:-]{0,127}$",
        ));
    }
    if plan.steps.is_empty() || plan.steps.len() > JOB_STEPS_MAX {
        return Err(invalid(format!(
            "steps has {} entries; 1-{JOB_STEPS_MAX}",
            plan.steps.len()
        )));
    }
    if plan.finally_steps.len() > JOB_FINALLY_STEPS_MAX {
        return Err(invalid(format!(
            "finally_steps has {} entries; at most {JOB_FINALLY_STEPS_MAX}",
            plan.finally_steps.len()
        )));
    }
    if plan.temporary_files.len() > JOB_TEMP_FILES_MAX {
        return Err(invalid(format!(
            "temporary_files has {} files; at most {JOB_TEMP_FILES_MAX}",
            plan.temporary_files.len()
        )));
    }
    let temp_bytes: usize = plan.temporary_files.values().map(String::len).sum();
    if temp_bytes > JOB_TEMP_FILES_MAX_BYTES {
        return Err(ToolError::limit(format!(
            "temporary_files hold {temp_bytes} bytes; at most {JOB_TEMP_FILES_MAX_BYTES}"
        )));
    }
    if let Some(bad) = plan.temporary_files.keys().find(|n| !valid_temp_name(n)) {
        return Err(invalid(format!(
            "temporary file name {bad:?} must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,63}}$"
        )));
    }
    if plan.depends_on.len() > JOB_DEPENDS_MAX {
        return Err(invalid(format!(
            "depends_on names {} jobs; at most {JOB_DEPENDS_MAX}",
            plan.depends_on.len()
        )));
    }
    let size = serde_json::to_vec(plan).map_or(usize::MAX, |v| v.len());
    if size > JOB_PLAN_MAX_BYTES {
        return Err(ToolError::limit(format!(
            "the plan is {size} bytes as JSON; at most {JOB_PLAN_MAX_BYTES}"
        )));
    }
    let mut used = BTreeSet::new();
    let mut cwds = Vec::new();
    let all = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("steps[{i}]"), s))
        .chain(
            plan.finally_steps
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("finally_steps[{i}]"), s)),
        );
    for (at, step) in all {
        cwds.push(validate_step(&at, step, plan, checks, &mut used)?);
    }
    let mut resources = BTreeMap::new();
    for alias in used {
        let Some(entry) = checks.resources.get(&alias) else {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!(
                    "resource {alias:?} is not registered (machine-mcp resource add {alias} PATH)"
                ),
            ));
        };
        let state = resources::check(entry);
        if state != Validity::Ok {
            return Err(ToolError::new(
                ToolErrorCode::Unavailable,
                format!(
                    "resource {alias:?} is not usable now: its state is {} (machine-mcp resource check)",
                    state.as_str()
                ),
            ));
        }
        resources.insert(alias, entry.clone());
    }
    Ok(Validated { cwds, resources })
}

fn validate_step(
    at: &str,
    step: &Step,
    plan: &Plan,
    checks: &Checks<'_>,
    used: &mut BTreeSet<String>,
) -> ToolResult<PathBuf> {
    if step.shell {
        if checks.exec_mode < ExecMode::Shell {
            return Err(ToolError::new(
                ToolErrorCode::PolicyDenied,
                format!("{at}: shell steps need exec mode shell"),
            ));
        }
        if step.argv.len() != 1 {
            return Err(invalid(format!(
                "{at}: a shell step's argv is exactly one command line"
            )));
        }
    }
    crate::tools::process::engine::check_argv(&step.argv)
        .map_err(|e| invalid(format!("{at}.argv: {e}")))?;
    if let Some(t) = step.timeout_seconds
        && !(1..=JOB_STEP_TIMEOUT_MAX.as_secs()).contains(&t)
    {
        return Err(invalid(format!(
            "{at}.timeout_seconds must be 1-{}",
            JOB_STEP_TIMEOUT_MAX.as_secs()
        )));
    }
    if let Some(s) = &step.stdin
        && s.len() > JOB_STDIN_MAX_BYTES
    {
        return Err(ToolError::limit(format!(
            "{at}.stdin is {} bytes; at most {JOB_STDIN_MAX_BYTES}",
            s.len()
        )));
    }
    if step.stdin.is_some() && step.stdin_resource.is_some() {
        return Err(invalid(format!(
            "{at}: stdin and stdin_resource exclude each other"
        )));
    }
    env::validate(&step.env).map_err(|e| invalid(format!("{at}.env: {e}")))?;
    let env_bytes: usize = step.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if env_bytes > JOB_STEP_ENV_MAX_BYTES {
        return Err(ToolError::limit(format!(
            "{at}.env holds {env_bytes} bytes; at most {JOB_STEP_ENV_MAX_BYTES}"
        )));
    }
    if let Some(var) = step
        .env_resources
        .keys()
        .find(|k| step.env.contains_key(*k))
    {
        return Err(invalid(format!(
            "{at}: {var} is in both env and env_resources"
        )));
    }
    let names: BTreeMap<String, String> = step
        .env_resources
        .keys()
        .map(|k| (k.clone(), String::new()))
        .collect();
    env::validate(&names).map_err(|e| invalid(format!("{at}.env_resources: {e}")))?;
    let mut note = |alias: &str, field: &str| -> ToolResult<()> {
        if !resources::valid_alias(alias) {
            return Err(invalid(format!(
                "{at}.{field}: resource alias {alias:?} must match ^[a-z][a-z0-9._-]{{0,63}}$"
            )));
        }
        used.insert(alias.to_owned());
        Ok(())
    };
    for alias in step.env_resources.values() {
        note(alias, "env_resources")?;
    }
    if let Some(alias) = &step.stdin_resource {
        note(alias, "stdin_resource")?;
    }
    for (field, text) in step
        .argv
        .iter()
        .map(|a| ("argv", a.as_str()))
        .chain(step.env.values().map(|v| ("env", v.as_str())))
    {
        let parts = parse_placeholders(text).map_err(|e| invalid(format!("{at}.{field}: {e}")))?;
        for p in parts.into_iter().filter_map(Result::err) {
            match p {
                Placeholder::Temp(name) if !plan.temporary_files.contains_key(&name) => {
                    return Err(invalid(format!(
                        "{at}.{field}: {{{{temp:{name}}}}} names no temporary file"
                    )));
                }
                Placeholder::Resource(alias) => note(&alias, field)?,
                _ => {}
            }
        }
    }
    let cwd = checks
        .workspace
        .resolve(step.cwd.as_deref().unwrap_or("."))?;
    if !cwd.real().is_dir() {
        return Err(invalid(format!(
            "{at}.cwd {}: not a directory",
            checks.workspace.display(cwd.real())
        )));
    }
    Ok(cwd.real().to_owned())
}

/// The canonical hash of a plan: SHA-256 of its JSON with every field present and maps in key
/// order, so the same plan hashes the same however it was spelled.
pub(crate) fn canonical_sha256(plan: &Plan) -> String {
    sha256_hex(&serde_json::to_vec(plan).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_parsed_and_unknown_ones_refused() {
        let parts = parse_placeholders("--f={{temp:a.toml}} in {{job:workspace}}").unwrap();
        assert_eq!(
            parts,
            vec![
                Ok("--f="),
                Err(Placeholder::Temp("a.toml".into())),
                Ok(" in "),
                Err(Placeholder::Workspace),
            ]
        );
        assert!(parse_placeholders("{{nope:x}}").is_err());
        assert!(parse_placeholders("{{job:other}}").is_err());
        assert!(parse_placeholders("{{temp:x").is_err());
        assert_eq!(
            parse_placeholders("plain }} text").unwrap(),
            vec![Ok("plain }} text")]
        );
    }

    #[test]
    fn keys_follow_the_pattern() {
        assert!(valid_key("ci-2026:run_1.a~b"));
        for bad in ["", "-a", "a b", "a/b", &"a".repeat(129)] {
            assert!(!valid_key(bad), "{bad}");
        }
    }

    #[test]
    fn the_canonical_hash_ignores_spelling_but_not_content() {
        let a: Plan = serde_json::from_str(
            r#"{"name":"n","idempotency_key":"k","steps":[{"argv":["true"]}]}"#,
        )
        .unwrap();
        let b: Plan = serde_json::from_str(
            r#"{"steps":[{"argv":["true"],"env":{},"allow_failure":false}],"idempotency_key":"k","name":"n","finally_steps":[]}"#,
        )
        .unwrap();
        assert_eq!(canonical_sha256(&a), canonical_sha256(&b));
        let mut c = a.clone();
        c.steps[0].argv.push("x".into());
        assert_ne!(canonical_sha256(&a), canonical_sha256(&c));
    }
}
