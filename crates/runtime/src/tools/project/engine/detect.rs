//! What a project root holds: build systems and package managers (with the file that decided
//! each), their script, target or member **names** (never a script's body or a dependency's
//! value), CI entry points, version-hint files and common docs. Only the root itself is looked
//! at (and `.github/workflows`, `.circleci`, `.ci`, `.buildkite` under it). Each build system's
//! own rules are in `systems`.

use schemars::JsonSchema;
use serde::Serialize;

use crate::limits::COMMANDS_MAX;

use super::{
    Problem, ProjectDir, one_line,
    systems::{self, present},
};

/// Names of one build system `project_overview` shows in full (scripts, targets, members);
/// more are counted in `names_total`. [`detect`] keeps every name (each may become an alias
/// `list_commands` pages through); [`Facts::keep_first`] applies this bound for a result.
pub(crate) const NAMES_MAX: usize = COMMANDS_MAX;
/// Top-level entries of the project root kept; more are counted.
pub(crate) const TOP_LEVEL_MAX: usize = 500;
/// CI entry points kept; more are counted.
pub(crate) const CI_MAX: usize = 100;
/// Longest version-hint value or note shown, in bytes.
pub(super) const VALUE_MAX_BYTES: usize = 100;

/// Version-hint files and the tool each names a version of.
const VERSION_FILES: &[(&str, &str)] = &[
    ("rust-toolchain", "rust"),
    ("rust-toolchain.toml", "rust"),
    (".nvmrc", "node"),
    (".node-version", "node"),
    (".python-version", "python"),
    (".tool-versions", "several"),
    (".java-version", "java"),
    (".ruby-version", "ruby"),
];

/// CI entry points that are one file (or directory, with a trailing `/`).
const CI_FILES: &[&str] = &[
    ".gitlab-ci.yml",
    ".circleci/config.yml",
    "Jenkinsfile",
    "azure-pipelines.yml",
    ".ci/run",
];

/// One build system or package manager found at the project root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct BuildSystem {
    /// cargo, node, python, go, make, cmake, gradle or maven.
    pub(crate) ecosystem: &'static str,
    /// The program that builds or runs it: cargo; npm, pnpm, yarn or bun; uv, poetry, pipenv
    /// or pip; go; make; cmake; ./gradlew or gradle; ./mvnw or mvn.
    pub(crate) tool: &'static str,
    /// The file (relative to the project root) that decided `tool`, e.g. the lockfile.
    pub(crate) decided_by: String,
    /// Why, when more than one file could have decided (or none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
    /// The files of this ecosystem at the project root.
    pub(crate) files: Vec<String>,
    /// What `names` are: scripts (package.json), targets (makefile), members (Cargo
    /// workspace), package (Cargo package), entry_points (Python).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) names_kind: Option<&'static str>,
    /// The names: makefile targets and Cargo members in the file's order, package.json scripts
    /// and Python entry points sorted by name; at most 512 (the first 10 in a summary;
    /// list_commands pages through the aliases of all of them). Never a script's body or a
    /// dependency.
    pub(crate) names: Vec<String>,
    /// Names in all.
    pub(crate) names_total: usize,
}

impl BuildSystem {
    /// A build system of `ecosystem` run by `tool`, decided by `decided_by`; no files or names yet.
    pub(super) fn new(ecosystem: &'static str, tool: &'static str, decided_by: &str) -> Self {
        Self {
            ecosystem,
            tool,
            decided_by: decided_by.to_owned(),
            note: None,
            files: Vec::new(),
            names_kind: None,
            names: Vec::new(),
            names_total: 0,
        }
    }

    /// The line of this build system in a text: `ecosystem (tool; decided by FILE; note)`.
    pub(crate) fn head(&self) -> String {
        let mut s = format!(
            "{} ({}; decided by {}",
            self.ecosystem, self.tool, self.decided_by
        );
        if let Some(n) = &self.note {
            s.push_str("; ");
            s.push_str(n);
        }
        s.push(')');
        s
    }
}

/// A version-hint file and what it says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct VersionHint {
    /// The file, relative to the project root.
    pub(crate) file: String,
    /// The tool it names a version of (rust, node, python, java, ruby, go; several for
    /// .tool-versions).
    pub(crate) tool: &'static str,
    /// The version it names (its first line, the toolchain channel, or the `go` line), at most
    /// 100 bytes; absent when the file could not be read or says nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
}

/// Everything [`detect`] found.
#[derive(Debug, Default, Clone, Serialize, JsonSchema)]
pub(crate) struct Facts {
    /// Names at the project root (directories end in `/`; `.git` left out), byte-sorted; at
    /// most 500 (40 in a summary). When top_level_complete is false these are the first of the
    /// entries read, not of the whole directory: a name missing here may still exist.
    pub(crate) top_level: Vec<String>,
    /// Entries at the project root in all, of those read.
    pub(crate) top_level_total: usize,
    /// Every entry of the root was read. A root of more than 10000 entries is not: its first
    /// 10000 in directory order (not sorted) are read, and the rest are neither counted nor
    /// named.
    pub(crate) top_level_complete: bool,
    /// Build systems and package managers, in the order cargo, node, python, go, make, cmake,
    /// gradle, maven.
    pub(crate) build_systems: Vec<BuildSystem>,
    /// CI entry points (workflow files, pipeline files), relative to the project root.
    pub(crate) ci: Vec<String>,
    /// CI entry points in all.
    pub(crate) ci_total: usize,
    /// Version-hint files.
    pub(crate) version_hints: Vec<VersionHint>,
    /// Common docs at the project root (README*, CONTRIBUTING*, AGENTS.md, CLAUDE.md,
    /// ARCHITECTURE.md, CHANGELOG*, docs/).
    pub(crate) docs: Vec<String>,
    /// Project files that could not be used (too large, not parsable), with why.
    pub(crate) problems: Vec<Problem>,
}

impl Facts {
    /// The build system of `ecosystem`, if one was found.
    pub(crate) fn system(&self, ecosystem: &str) -> Option<&BuildSystem> {
        self.build_systems.iter().find(|b| b.ecosystem == ecosystem)
    }

    /// Keeps only the first `names` names of each build system and the first `entries`
    /// top-level entries (totals stay), for a summary.
    pub(crate) fn keep_first(&mut self, names: usize, entries: usize) {
        for b in &mut self.build_systems {
            b.names.truncate(names);
        }
        self.top_level.truncate(entries);
    }
}

/// The facts of the project root `dir` (module docs). Never fails: what cannot be read or
/// parsed is a [`Problem`].
pub(crate) fn detect(dir: &ProjectDir<'_>) -> Facts {
    let mut f = Facts::default();
    let entries = match dir.list("") {
        Some((entries, complete)) => {
            f.top_level_complete = complete;
            entries
        }
        None => {
            f.problems
                .push(dir.problem("", "the project root cannot be listed"));
            Vec::new()
        }
    };
    let shown: Vec<String> = entries
        .iter()
        .filter(|(n, _)| n != ".git")
        .map(|(n, d)| if *d { format!("{n}/") } else { n.clone() })
        .collect();
    f.top_level_total = shown.len();
    f.top_level = shown.into_iter().take(TOP_LEVEL_MAX).collect();
    systems::cargo(dir, &mut f);
    systems::node(dir, &mut f);
    systems::python(dir, &entries, &mut f);
    systems::go(dir, &mut f);
    systems::make(dir, &mut f);
    systems::simple(dir, &mut f);
    ci(dir, &mut f);
    versions(dir, &mut f);
    f.docs = entries
        .iter()
        .filter(|(n, d)| is_doc(n, *d))
        .map(|(n, d)| if *d { format!("{n}/") } else { n.clone() })
        .collect();
    f
}

fn ci(dir: &ProjectDir<'_>, f: &mut Facts) {
    let mut found: Vec<String> = Vec::new();
    if let Some((names, _)) = dir.list(".github/workflows") {
        found.extend(
            names
                .into_iter()
                .filter(|(n, d)| !d && (n.ends_with(".yml") || n.ends_with(".yaml")))
                .map(|(n, _)| format!(".github/workflows/{n}")),
        );
    }
    found.extend(present(dir, CI_FILES));
    if dir.is_real_dir(".buildkite") {
        found.push(".buildkite/".to_owned());
    }
    f.ci_total = found.len();
    found.truncate(CI_MAX);
    f.ci = found;
}

fn versions(dir: &ProjectDir<'_>, f: &mut Facts) {
    let mut hints = Vec::new();
    for (file, tool) in VERSION_FILES {
        if !dir.exists(file) {
            continue;
        }
        let value = match dir.read(file) {
            Ok(Some(bytes)) => version_value(file, &crate::primitives::text::lossy(&bytes)),
            Ok(None) => None,
            Err(e) => {
                f.problems.push(dir.problem(file, e.message));
                None
            }
        };
        hints.push(VersionHint {
            file: (*file).to_owned(),
            tool,
            value,
        });
    }
    // go.mod's `go` line was added by `go`; version files come first.
    hints.append(&mut f.version_hints);
    f.version_hints = hints;
}

/// What version-hint file `file` with text `text` says.
fn version_value(file: &str, text: &str) -> Option<String> {
    if file.starts_with("rust-toolchain")
        && let Ok(t) = toml::from_str::<toml::Table>(text)
    {
        return t
            .get("toolchain")
            .and_then(|c| c.get("channel"))
            .and_then(toml::Value::as_str)
            .map(|c| one_line(c, VALUE_MAX_BYTES));
    }
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let v = if file == ".tool-versions" {
        lines.collect::<Vec<_>>().join("; ")
    } else {
        lines.next()?.to_owned()
    };
    let v = one_line(&v, VALUE_MAX_BYTES);
    (!v.is_empty()).then_some(v)
}

fn is_doc(name: &str, is_dir: bool) -> bool {
    if is_dir {
        return name == "docs";
    }
    let upper = name.to_ascii_uppercase();
    ["README", "CONTRIBUTING", "CHANGELOG"]
        .iter()
        .any(|p| upper.starts_with(p))
        || matches!(
            upper.as_str(),
            "AGENTS.MD" | "CLAUDE.MD" | "ARCHITECTURE.MD"
        )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::path::Workspace;

    fn facts(files: &[(&str, &str)]) -> Facts {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        for (rel, body) in files {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        let ws = Workspace::new(&root, true, false).unwrap();
        detect(&ProjectDir::new(&ws, Path::new(&root)))
    }

    #[test]
    fn names_without_bodies_and_problems_without_failing() {
        let f = facts(&[
            (
                "package.json",
                r#"{"scripts": {"build": "tsc -p SECRET_BODY", "test": "node t.js"}, "dependencies": {"left-pad": "SECRET_DEP"}}"#,
            ),
            ("yarn.lock", ""),
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\"a\", \"b\"]\n[workspace.dependencies]\nx = \"SECRET_DEP\"\n",
            ),
            ("Makefile", "all: build\nbuild:\n\techo SECRET_BODY\n"),
            ("pyproject.toml", "this is = not toml ["),
            ("rust-toolchain.toml", "[toolchain]\nchannel = \"1.85\"\n"),
            (".nvmrc", "20\n"),
            (".github/workflows/ci.yml", ""),
            ("Jenkinsfile", ""),
            ("README.md", ""),
            ("docs/x.md", ""),
        ]);
        let node = f.system("node").unwrap();
        assert_eq!((node.tool, node.decided_by.as_str()), ("yarn", "yarn.lock"));
        assert_eq!(node.names, ["build", "test"]);
        let cargo = f.system("cargo").unwrap();
        assert_eq!(cargo.names, ["a", "b"]);
        assert_eq!(f.system("make").unwrap().names, ["all", "build"]);
        let py = f.system("python").unwrap();
        assert_eq!(py.tool, "pip");
        assert_eq!(f.problems.len(), 1, "{:?}", f.problems);
        assert!(f.problems[0].message.contains("not valid TOML"));
        let json = serde_json::to_string(&f).unwrap();
        assert!(!json.contains("SECRET"), "{json}");
        assert_eq!(f.ci, [".github/workflows/ci.yml", "Jenkinsfile"]);
        let hints: Vec<_> = f
            .version_hints
            .iter()
            .map(|h| (h.file.as_str(), h.value.as_deref()))
            .collect();
        assert_eq!(
            hints,
            [
                ("rust-toolchain.toml", Some("1.85")),
                (".nvmrc", Some("20"))
            ]
        );
        assert_eq!(f.docs, ["README.md", "docs/"]);
    }

    #[test]
    fn a_package_json_that_is_not_json_is_a_problem_and_the_rest_stays() {
        let f = facts(&[
            ("package.json", "{ not json"),
            ("pnpm-lock.yaml", ""),
            ("go.mod", "module example.com/x\n\ngo 1.22\n"),
        ]);
        let node = f.system("node").unwrap();
        assert_eq!(node.tool, "pnpm");
        assert!(node.names.is_empty());
        assert!(f.problems[0].message.contains("not valid JSON"));
        assert_eq!(
            f.system("go").unwrap().note.as_deref(),
            Some("module example.com/x")
        );
        assert_eq!(f.version_hints[0].value.as_deref(), Some("1.22"));
    }
}
