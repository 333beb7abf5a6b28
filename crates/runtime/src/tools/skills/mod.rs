//! Skills: `list_skills`, `load_skill`, and each skill as an MCP prompt
//! ([`prompt_list`], [`prompt_get`], which the registry serves as `prompts/list` and
//! `prompts/get`).
//!
//! Where skills live, how a `SKILL.md` is read and checked, and the bounds: the [`engine`].
//! Both tools are read-only and available to every role; a caller whose paths are restricted
//! sees the project's skills only, never the user-level ones.

use std::{path::PathBuf, sync::Arc};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    RESULT_TEXT_DEFAULT_CHARS, SKILL_FILE_MAX_BYTES, SKILL_INVENTORY_MAX, SKILL_SCAN_MAX_ENTRIES,
    SKILLS_MAX,
};

use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{Budget, TRAILER_RESERVE, TextView, arg, body_limit, count, trailer},
    },
    path::Workspace,
    policy::Capability,
    primitives::project::target_dir,
    tools::{
        blocking::blocking,
        family::{Family, PromptEntry, PromptText, Prompts},
    },
};

pub(crate) mod engine;

use engine::{Bounds, InventoryFile, ProblemKind, Scan, Scope, Skill};

/// The family's entry in the registry: `list_skills`, `load_skill`, and each skill as an MCP
/// prompt.
pub(crate) const FAMILY: Family = Family {
    specs,
    state: None,
    resources: None,
    prompts: Some(&PROMPTS),
};

/// The catalog entries of the family: `list_skills`, `load_skill`.
pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "list_skills",
                title: "List skills",
                description: "List the skills (instruction bundles whose SKILL.md front matter \
                              gives a name and description) that apply to a directory: from \
                              .agents/skills, .claude/skills and .codex/skills in path (default \
                              \".\") and each directory above it up to the project root, nearer \
                              first, then the user's ~/.agents, ~/.claude and ~/.codex skills \
                              when paths are unrestricted. Each skill: name, description, path, \
                              root. query ranks by name and description, best first, and keeps \
                              matches only. Bundles that cannot be used (malformed front matter, \
                              a name that is not lowercase-hyphenated or not its directory's, \
                              binary SKILL.md, a link out of the workspace) are under problems; \
                              a same-named skill of a farther root is under shadowed. Use \
                              load_skill to read one.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            list_skills,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "load_skill",
                title: "Load a skill",
                description: "Load one skill by the name list_skills gives: the text of its \
                              SKILL.md (at most 32768 bytes; truncated says when cut), its name \
                              and description, and its bundle's files (path relative to the \
                              skill's path and size; at most 200, inventory_complete says whether \
                              all were listed). Follow the text's instructions; read the files it \
                              names with read_file. Never runs anything. path (default \".\") is \
                              the directory whose skills are searched, as in list_skills.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            load_skill,
        ),
    ]
}

fn default_dot() -> String {
    ".".to_owned()
}

/// The user's home directory when `access`'s paths are unrestricted: the user-level skill
/// roots are never read for a caller confined to the workspace.
fn home_for(ws: &Workspace) -> Option<PathBuf> {
    if ws.restricted() {
        None
    } else {
        crate::config::home()
    }
}

/// The scan for `access`'s caller of the skills of `target`.
fn scan_for(ws: &Workspace, target: &std::path::Path) -> Scan {
    engine::scan(ws, target, home_for(ws).as_deref(), Bounds::CONTRACT)
}

// === list_skills ===

/// Arguments of `list_skills`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListSkillsArgs {
    /// The directory (or a file in it) whose skills apply, relative to the workspace (default
    /// "."): its skill roots and those of the directories above it, up to the project root.
    #[serde(default = "default_dot")]
    path: String,
    /// Words to rank the skills by (name matches first, then description matches); skills that
    /// match none are left out.
    query: Option<String>,
}

/// One skill as `list_skills` shows it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SkillView {
    /// Its front matter `name`, the name of its directory: lowercase letters, digits and
    /// hyphens (the argument of load_skill).
    name: String,
    /// Its front matter `description`: when to use it (at most 1024 characters).
    description: String,
    /// The skill's directory (for a symlinked bundle: the link).
    path: String,
    /// The skill root it was found in, e.g. `.claude/skills`.
    root: String,
    /// `project` (from the target up to the project root) or `user` (the user's home).
    scope: Scope,
    /// With a query: how well it matches (higher is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<u32>,
}

/// A skill hidden by a same-named skill of a nearer root.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ShadowedView {
    /// The shared name.
    name: String,
    /// The hidden skill's directory.
    path: String,
    /// The directory of the skill listed under that name.
    by: String,
}

/// A skill bundle (or skill root) that could not be used.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ProblemView {
    /// The root, the skill's directory or its SKILL.md.
    path: String,
    /// What kind of problem.
    kind: ProblemKind,
    /// What is wrong.
    reason: String,
}

/// Result of `list_skills`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListSkillsOutput {
    /// The directory whose skills were listed.
    target: String,
    /// Its project root: the nearest Git work tree containing it, else the workspace.
    project_root: String,
    /// The query, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    /// The skills: by precedence (nearer roots first, then the user's) and name; with a query,
    /// only matches, best first.
    skills: Vec<SkillView>,
    /// Usable skills found (each name once), matching the query or not.
    total: usize,
    /// Skills hidden by a same-named skill of a nearer root.
    shadowed: Vec<ShadowedView>,
    /// Bundles and roots that could not be used (at most 256 listed).
    problems: Vec<ProblemView>,
    /// Problems found after 256 were listed: counted only.
    problems_not_listed: usize,
    /// Skill bundles found after 256 were read: neither read nor listed.
    not_read: usize,
    /// The skill roots that exist and were read, highest precedence first.
    roots: Vec<String>,
    /// Whether the user-level roots (~/.agents/skills, ~/.claude/skills, ~/.codex/skills) were
    /// searched: only for callers whose paths are unrestricted.
    user_level: bool,
    /// Every skill root was read whole (the scan reads at most 10000 directory entries) and
    /// every bundle found was read.
    complete: bool,
    #[serde(skip)]
    stopped: bool,
}

impl TextView for ListSkillsOutput {
    fn summary(&self) -> String {
        let mut s = format!("list_skills {}: ", self.target);
        match &self.query {
            Some(q) => s.push_str(&format!(
                "{} of {} match {}, best first",
                self.skills.len(),
                count(self.total as u64, "skill", "skills"),
                arg(q)
            )),
            None => s.push_str(&count(self.total as u64, "skill", "skills")),
        }
        let problems = self.problems.len() + self.problems_not_listed;
        if problems > 0 {
            s.push_str(&format!(
                ", {} (listed at the end)",
                count(problems as u64, "problem", "problems")
            ));
        }
        if !self.shadowed.is_empty() {
            s.push_str(&format!(", {} shadowed", self.shadowed.len()));
        }
        if !self.user_level {
            s.push_str(", user-level skills not searched (paths are restricted, or no HOME)");
        }
        if let Some(first) = self.skills.first() {
            s.push_str(&format!(
                "; read one with load_skill {{\"name\": {}}}",
                arg(&first.name)
            ));
        }
        if self.stopped {
            s.push_str(&format!(
                "; incomplete: stopped after {SKILL_SCAN_MAX_ENTRIES} directory entries"
            ));
        } else if self.not_read > 0 {
            s.push_str(&format!(
                "; incomplete: {} more skill bundles not read (at most {SKILLS_MAX} are)",
                self.not_read
            ));
        } else {
            s.push_str("; complete");
        }
        s
    }

    fn body(&self, out: &mut String) {
        let mut budget =
            Budget::new(body_limit(RESULT_TEXT_DEFAULT_CHARS).saturating_sub(TRAILER_RESERVE));
        let mut shown = 0;
        for k in &self.skills {
            let line = format!("{} — {} ({})\n", k.name, k.description, k.path);
            if !budget.take(line.len()) {
                break;
            }
            out.push_str(&line);
            shown += 1;
        }
        let mut lines = Vec::new();
        if shown < self.skills.len() {
            lines.push(format!(
                "… {} more skills in structuredContent",
                self.skills.len() - shown
            ));
        }
        lines.extend(
            self.problems
                .iter()
                .map(|p| format!("problem ({}): {}: {}", p.kind.as_str(), p.path, p.reason)),
        );
        lines.extend(
            self.shadowed
                .iter()
                .map(|h| format!("shadowed: {} ({}) by {}", h.name, h.path, h.by)),
        );
        trailer(out, &lines);
    }
}

async fn list_skills(
    rt: Arc<Access>,
    args: ListSkillsArgs,
    _cx: CallContext,
) -> ToolResult<ListSkillsOutput> {
    blocking(move || {
        let ws = rt.workspace();
        let target = target_dir(ws, &args.path)?;
        let scan = scan_for(ws, &target);
        let query = args.query.filter(|q| !q.trim().is_empty());
        let ranked = query.as_deref().and_then(|q| engine::rank(&scan.skills, q));
        let view = |s: &Skill, score: Option<u32>| SkillView {
            name: s.name.clone(),
            description: s.description.clone(),
            path: s.path.clone(),
            root: s.root.clone(),
            scope: s.scope,
            score,
        };
        let skills = match &ranked {
            Some(r) => r
                .iter()
                .map(|&(i, score)| view(&scan.skills[i], Some(score)))
                .collect(),
            None => scan.skills.iter().map(|s| view(s, None)).collect(),
        };
        Ok(ListSkillsOutput {
            target: ws.display(&target),
            project_root: scan.project_root.clone(),
            query: ranked.is_some().then_some(query).flatten(),
            skills,
            total: scan.skills.len(),
            complete: scan.complete(),
            stopped: scan.stopped,
            shadowed: scan
                .shadowed
                .into_iter()
                .map(|h| ShadowedView {
                    name: h.name,
                    path: h.path,
                    by: h.by,
                })
                .collect(),
            problems: scan
                .problems
                .into_iter()
                .map(|p| ProblemView {
                    path: p.path,
                    kind: p.kind,
                    reason: p.reason,
                })
                .collect(),
            problems_not_listed: scan.problems_not_listed,
            not_read: scan.not_read,
            roots: scan.roots,
            user_level: scan.user_level,
        })
    })
    .await
}

// === load_skill ===

/// Arguments of `load_skill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadSkillArgs {
    /// The skill's name, as list_skills gives it.
    name: String,
    /// The directory (or a file in it) whose skills are searched, as in list_skills (default
    /// ".").
    #[serde(default = "default_dot")]
    path: String,
}

/// Result of `load_skill`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct LoadSkillOutput {
    /// Its front matter `name`.
    name: String,
    /// Its front matter `description`.
    description: String,
    /// The skill's directory (for a symlinked bundle: the link); the files are relative to it.
    path: String,
    /// The skill root it was found in.
    root: String,
    /// `project` or `user`.
    scope: Scope,
    /// The text of SKILL.md, front matter included (at most 32768 bytes, whole characters).
    text: String,
    /// Size of SKILL.md in bytes.
    size_bytes: u64,
    /// SKILL.md is larger than the text returned.
    truncated: bool,
    /// The bundle's files (SKILL.md included) in path order: at most 200, symlinks listed and
    /// never followed.
    files: Vec<InventoryFile>,
    /// Files the inventory saw (a lower bound when it is not complete).
    files_seen: usize,
    /// Directories of the bundle not walked (more than 16 levels deep, or unreadable).
    dirs_not_walked: usize,
    /// Every file of the bundle is listed in files: the walk (at most 10000 directory entries)
    /// saw the whole bundle and no more than 200 files.
    inventory_complete: bool,
    #[serde(skip)]
    stopped: bool,
}

impl LoadSkillOutput {
    /// The lines of the inventory that fit in `budget`, and a line counting the rest.
    fn inventory_lines(&self, budget: &mut Budget, out: &mut String) {
        let mut shown = 0;
        for f in &self.files {
            let line = format!("{}\t{}\n", f.path, f.bytes);
            if !budget.take(line.len()) {
                break;
            }
            out.push_str(&line);
            shown += 1;
        }
        let more = self.files_seen.saturating_sub(shown);
        if more > 0 || !self.inventory_complete {
            out.push_str(&format!(
                "… {more}{} more files not shown{}\n",
                if self.inventory_complete { "" } else { " or" },
                if self.stopped {
                    format!(" (the walk stopped after {SKILL_SCAN_MAX_ENTRIES} directory entries)")
                } else {
                    String::new()
                }
            ));
        }
    }
}

impl TextView for LoadSkillOutput {
    fn summary(&self) -> String {
        let mut s = format!(
            "load_skill {} ({}): SKILL.md, {} bytes",
            self.name, self.path, self.size_bytes
        );
        if self.truncated {
            s.push_str(&format!(", cut at {SKILL_FILE_MAX_BYTES} bytes"));
        }
        // A walk that stopped or left directories out saw only some of the files.
        let lower_bound = self.stopped || self.dirs_not_walked > 0;
        s.push_str(&format!(
            "; {}{} in the bundle",
            if lower_bound { "at least " } else { "" },
            count(self.files_seen as u64, "file", "files")
        ));
        if !self.inventory_complete {
            s.push_str(&format!(
                " (inventory incomplete: at most {SKILL_INVENTORY_MAX} files are listed and \
                 {SKILL_SCAN_MAX_ENTRIES} entries walked)"
            ));
        }
        s.push_str(&format!(
            "; the files are listed after the text, relative to {}; read them with read_file",
            self.path
        ));
        s
    }

    fn body(&self, out: &mut String) {
        let mut budget = Budget::new(body_limit(RESULT_TEXT_DEFAULT_CHARS));
        // SKILL.md is at most SKILL_FILE_MAX_BYTES, well inside the default bound.
        budget.take(self.text.len());
        out.push_str(&self.text);
        if !self.text.ends_with('\n') {
            out.push('\n');
        }
        if self.truncated {
            out.push_str(&format!(
                "[SKILL.md continues: only its first {SKILL_FILE_MAX_BYTES} bytes are returned; \
                 read the rest with read_file]\n"
            ));
        }
        let heading = format!("\n--- files of {} (path, bytes) ---\n", self.path);
        budget.take(heading.len() + 200);
        out.push_str(&heading);
        self.inventory_lines(&mut budget, out);
    }
}

/// The skill `name` of `scan`.
///
/// # Errors
/// `not_found`, naming up to [`NOT_FOUND_NAMES`] skills that exist and how many bundles have
/// problems.
fn find<'a>(scan: &'a Scan, name: &str, target: &str) -> ToolResult<&'a Skill> {
    if let Some(s) = scan.skills.iter().find(|s| s.name == name) {
        return Ok(s);
    }
    let names: Vec<&str> = scan
        .skills
        .iter()
        .take(NOT_FOUND_NAMES)
        .map(|s| s.name.as_str())
        .collect();
    let mut message = format!("no skill named {} applies to {target}", arg(name));
    if names.is_empty() {
        message.push_str("; there are no skills");
    } else {
        message.push_str(&format!("; skills: {}", names.join(", ")));
        if scan.skills.len() > names.len() {
            message.push_str(&format!(" and {} more", scan.skills.len() - names.len()));
        }
    }
    if !scan.problems.is_empty() {
        message.push_str(&format!(
            "; {} could not be used (list_skills shows why)",
            count(scan.problems.len() as u64, "skill bundle", "skill bundles")
        ));
    }
    Err(ToolError::new(ToolErrorCode::NotFound, message)
        .detail("name", name)
        .detail("available", names))
}

/// Skill names a `not_found` error lists.
const NOT_FOUND_NAMES: usize = 20;

async fn load_skill(
    rt: Arc<Access>,
    args: LoadSkillArgs,
    _cx: CallContext,
) -> ToolResult<LoadSkillOutput> {
    blocking(move || {
        let ws = rt.workspace();
        let target = target_dir(ws, &args.path)?;
        let scan = scan_for(ws, &target);
        let skill = find(&scan, &args.name, &ws.display(&target))?;
        let loaded = engine::load(ws, skill, Bounds::CONTRACT)?;
        let inv = loaded.inventory;
        Ok(LoadSkillOutput {
            name: loaded.front_matter.name,
            description: loaded.front_matter.description,
            path: skill.path.clone(),
            root: skill.root.clone(),
            scope: skill.scope,
            text: loaded.entry.text,
            size_bytes: loaded.entry.size,
            truncated: loaded.entry.truncated,
            inventory_complete: inv.complete(),
            stopped: inv.stopped,
            files_seen: inv.files_seen,
            dirs_not_walked: inv.dirs_not_walked,
            files: inv.files,
        })
    })
    .await
}

// === MCP prompts ===

/// The skills as MCP prompts, as the registry serves them.
static PROMPTS: Prompts = Prompts {
    list: prompt_list,
    get: prompt_get,
};

/// The skills of the workspace root that `access`'s caller may read, as MCP prompts, in
/// `list_skills` order (precedence, then name). Skills with problems are not prompts. Blocking
/// (a bounded filesystem scan, as `list_skills`): call it off the async threads.
fn prompt_list(access: &Access) -> Vec<PromptEntry> {
    let ws = access.workspace();
    scan_for(ws, ws.root())
        .skills
        .into_iter()
        .map(|s| PromptEntry {
            name: s.name,
            title: None,
            description: s.description,
        })
        .collect()
}

/// The prompt of the skill `name` of the workspace root, as one user message: a line naming
/// the skill and its path, the text of its SKILL.md (at most 32768 bytes, with a note when
/// cut), then its bundle's files (paths relative to the skill's path, at most 200, with a line
/// counting the rest). Blocking, as [`prompt_list`].
///
/// # Errors
/// - `not_found`: no usable skill has that name (the message names up to 20 that exist).
/// - As `load_skill` when its SKILL.md changed since the scan: `path_boundary`, `not_found`,
///   `invalid_request` (no longer usable).
fn prompt_get(access: &Access, name: &str) -> ToolResult<PromptText> {
    let ws = access.workspace();
    let scan = scan_for(ws, ws.root());
    let skill = find(&scan, name, ".")?;
    let loaded = engine::load(ws, skill, Bounds::CONTRACT)?;
    let view = LoadSkillOutput {
        name: loaded.front_matter.name.clone(),
        description: loaded.front_matter.description.clone(),
        path: skill.path.clone(),
        root: skill.root.clone(),
        scope: skill.scope,
        inventory_complete: loaded.inventory.complete(),
        stopped: loaded.inventory.stopped,
        files_seen: loaded.inventory.files_seen,
        dirs_not_walked: loaded.inventory.dirs_not_walked,
        files: loaded.inventory.files,
        text: loaded.entry.text,
        size_bytes: loaded.entry.size,
        truncated: loaded.entry.truncated,
    };
    let mut text = format!(
        "Use the skill \"{}\" ({}): its SKILL.md follows, then its files, relative to {}.\n\n",
        view.name, view.path, view.path
    );
    view.body(&mut text);
    Ok(PromptText {
        name: view.name,
        description: view.description,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Runtime, RuntimeConfig,
        policy::{Policy, Profile},
    };

    #[test]
    fn skills_are_prompts_and_a_prompt_holds_the_text_and_the_files() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let bundle = root.join(".claude/skills/review");
        std::fs::create_dir_all(bundle.join("refs")).unwrap();
        std::fs::write(
            bundle.join("SKILL.md"),
            "---\nname: review\ndescription: Review a change\n---\nRead refs/checklist.md.\n",
        )
        .unwrap();
        std::fs::write(bundle.join("refs/checklist.md"), "- tests\n").unwrap();
        std::fs::create_dir_all(root.join(".agents/skills/broken")).unwrap();
        std::fs::write(
            root.join(".agents/skills/broken/SKILL.md"),
            "no front matter",
        )
        .unwrap();
        let rt = Arc::new(
            Runtime::new(RuntimeConfig {
                workspace: root.into(),
                policy: Policy::profile(Profile::Agent),
                default_yield_after: None,
                remote: false,
                state_dir: None,
                own_files: Vec::new(),
            })
            .unwrap(),
        );
        let access = rt.access(None);
        assert_eq!(
            prompt_list(&access),
            vec![PromptEntry {
                name: "review".into(),
                title: None,
                description: "Review a change".into()
            }]
        );
        let p = prompt_get(&access, "review").unwrap();
        assert!(
            p.text
                .starts_with("Use the skill \"review\" (.claude/skills/review)"),
            "{}",
            p.text
        );
        assert!(p.text.contains("Read refs/checklist.md.\n"), "{}", p.text);
        assert!(p.text.contains("refs/checklist.md\t8\n"), "{}", p.text);
        let e = prompt_get(&access, "broken").unwrap_err();
        assert_eq!(e.code(), ToolErrorCode::NotFound);
        assert!(e.message().contains("skills: review"), "{}", e.message());
        assert!(e.message().contains("1 skill bundle could not be used"));
    }
}
