//! The build systems and package managers [`super::detect`] recognises, one function each:
//! which files are there, which tool they decide, and the names (scripts, targets, members,
//! entry points) a caller can run or refer to. Only names are read: never a script's body or a
//! dependency's value.

use serde_json::Value;

use super::{
    Problem, ProjectDir, clean_name,
    detect::{BuildSystem, Facts, VALUE_MAX_BYTES, VersionHint},
    makefile, one_line, toml_error,
};

/// Lockfiles of the JavaScript package managers, in the order that decides when several are
/// present and `packageManager` names none of them.
pub(crate) const LOCKFILES: &[(&str, &str)] = &[
    ("package-lock.json", "npm"),
    ("npm-shrinkwrap.json", "npm"),
    ("pnpm-lock.yaml", "pnpm"),
    ("yarn.lock", "yarn"),
    ("bun.lockb", "bun"),
    ("bun.lock", "bun"),
];

/// The makefile names GNU make looks for, in its order (GNU make manual §3.2): the first present
/// is the one `make` reads.
const MAKEFILES: &[&str] = &["GNUmakefile", "makefile", "Makefile"];

/// The files of `names` present at the root.
pub(super) fn present(dir: &ProjectDir<'_>, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter(|n| dir.exists(n))
        .map(|n| (*n).to_owned())
        .collect()
}

/// The text of `rel`, or `None` with a problem pushed (absent files are `None` silently).
pub(super) fn text(dir: &ProjectDir<'_>, rel: &str, problems: &mut Vec<Problem>) -> Option<String> {
    match dir.read_text(rel) {
        Ok(t) => t,
        Err(e) => {
            problems.push(dir.problem(rel, e.message));
            None
        }
    }
}

/// Sets `b`'s names from `raw` (read from `rel`): every clean one (their number is bounded by
/// the file's, at most `PROJECT_FILE_MAX_BYTES`); a problem about `rel` counts the ones left
/// out.
fn set_names(
    b: &mut BuildSystem,
    kind: &'static str,
    raw: Vec<String>,
    (dir, rel): (&ProjectDir<'_>, &str),
    problems: &mut Vec<Problem>,
) {
    let total = raw.len();
    let clean: Vec<String> = raw.iter().filter_map(|n| clean_name(n)).collect();
    if clean.len() < total {
        problems.push(dir.problem(
            rel,
            format!(
                "{} {kind} names left out (control characters, or longer than {} bytes)",
                total - clean.len(),
                super::NAME_MAX_BYTES
            ),
        ));
    }
    b.names_kind = Some(kind);
    b.names_total = clean.len();
    b.names = clean;
}

fn strings(v: Option<&toml::Value>) -> Vec<String> {
    v.and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn keys(v: Option<&toml::Value>) -> Vec<String> {
    v.and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

fn toml_table(dir: &ProjectDir<'_>, rel: &str, problems: &mut Vec<Problem>) -> Option<toml::Table> {
    let t = text(dir, rel, problems)?;
    match toml::from_str::<toml::Table>(&t) {
        Ok(table) => Some(table),
        Err(e) => {
            problems.push(dir.problem(
                rel,
                format!(
                    "not valid TOML ({}); its names are not listed",
                    toml_error(&t, &e)
                ),
            ));
            None
        }
    }
}

pub(super) fn cargo(dir: &ProjectDir<'_>, f: &mut Facts) {
    if !dir.exists("Cargo.toml") {
        return;
    }
    let mut b = BuildSystem::new("cargo", "cargo", "Cargo.toml");
    b.files = present(dir, &["Cargo.toml", "Cargo.lock"]);
    if let Some(t) = toml_table(dir, "Cargo.toml", &mut f.problems) {
        let package = t
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(toml::Value::as_str)
            .and_then(clean_name);
        if let Some(ws) = t.get("workspace") {
            set_names(
                &mut b,
                "members",
                strings(ws.get("members")),
                (dir, "Cargo.toml"),
                &mut f.problems,
            );
            b.note = Some(match package {
                Some(p) => format!("a workspace whose root is package {p}"),
                None => "a workspace".to_owned(),
            });
        } else if let Some(p) = package {
            set_names(
                &mut b,
                "package",
                vec![p],
                (dir, "Cargo.toml"),
                &mut f.problems,
            );
        }
    }
    f.build_systems.push(b);
}

/// Which JavaScript package manager a project uses, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeDecision {
    /// npm, pnpm, yarn or bun.
    pub(crate) tool: &'static str,
    /// The lockfile that decided, or `package.json` when none did.
    pub(crate) decided_by: &'static str,
    /// Why, when it was not one lockfile alone.
    pub(crate) note: Option<String>,
}

/// The package manager of a project with the lockfiles `locks` (names from [`LOCKFILES`], in
/// that order) and `package.json`'s `packageManager` field (e.g. `"pnpm@9.1.0"`): one lockfile
/// decides; of several, the one of the manager `packageManager` names, else the first; with
/// none, `packageManager`'s manager, else npm.
pub(crate) fn decide_node(locks: &[&'static str], package_manager: Option<&str>) -> NodeDecision {
    let manager_of = |lock: &str| {
        LOCKFILES
            .iter()
            .find(|(l, _)| *l == lock)
            .map_or("npm", |(_, m)| *m)
    };
    let field = package_manager.map(|p| one_line(p, VALUE_MAX_BYTES));
    let named = field.as_deref().and_then(|p| {
        let name = p.split('@').next().unwrap_or("");
        ["npm", "pnpm", "yarn", "bun"]
            .into_iter()
            .find(|m| *m == name)
    });
    match locks {
        [only] => NodeDecision {
            tool: manager_of(only),
            decided_by: only,
            note: None,
        },
        [first, ..] => {
            let chosen = named
                .and_then(|m| locks.iter().find(|l| manager_of(l) == m))
                .copied();
            let all = locks.join(", ");
            NodeDecision {
                tool: manager_of(chosen.unwrap_or(first)),
                decided_by: chosen.unwrap_or(first),
                note: Some(match chosen {
                    Some(_) => format!("several lockfiles ({all}); packageManager chose"),
                    None => format!("several lockfiles ({all}); the first decides"),
                }),
            }
        }
        [] => match (named, field) {
            (Some(m), Some(p)) => NodeDecision {
                tool: m,
                decided_by: "package.json",
                note: Some(format!("no lockfile; packageManager is {p}")),
            },
            (None, Some(p)) => NodeDecision {
                tool: "npm",
                decided_by: "package.json",
                note: Some(format!(
                    "no lockfile; packageManager {p} names no known manager; npm assumed"
                )),
            },
            _ => NodeDecision {
                tool: "npm",
                decided_by: "package.json",
                note: Some("no lockfile; npm assumed".to_owned()),
            },
        },
    }
}

pub(super) fn node(dir: &ProjectDir<'_>, f: &mut Facts) {
    let locks: Vec<&'static str> = LOCKFILES
        .iter()
        .filter(|(l, _)| dir.exists(l))
        .map(|(l, _)| *l)
        .collect();
    let has_package = dir.exists("package.json");
    if !has_package && locks.is_empty() {
        return;
    }
    let mut manager = None;
    let mut scripts = None;
    if let Some(t) = text(dir, "package.json", &mut f.problems) {
        match serde_json::from_str::<Value>(&t) {
            Ok(Value::Object(o)) => {
                manager = o
                    .get("packageManager")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match o.get("scripts") {
                    None => scripts = Some(Vec::new()),
                    Some(Value::Object(s)) => scripts = Some(s.keys().cloned().collect()),
                    Some(_) => f.problems.push(dir.problem(
                        "package.json",
                        "its scripts field is not an object; no scripts are listed",
                    )),
                }
            }
            Ok(_) => f.problems.push(dir.problem(
                "package.json",
                "not a JSON object; its scripts are not listed and have no aliases",
            )),
            Err(e) => f.problems.push(dir.problem(
                "package.json",
                format!("not valid JSON ({e}); its scripts are not listed and have no aliases"),
            )),
        }
    }
    let d = decide_node(&locks, manager.as_deref());
    let mut b = BuildSystem::new("node", d.tool, d.decided_by);
    b.note = d.note;
    b.files = has_package
        .then(|| "package.json".to_owned())
        .into_iter()
        .chain(locks.iter().map(|l| (*l).to_owned()))
        .collect();
    if let Some(s) = scripts {
        set_names(&mut b, "scripts", s, (dir, "package.json"), &mut f.problems);
    }
    f.build_systems.push(b);
}

pub(super) fn python(dir: &ProjectDir<'_>, entries: &[(String, bool)], f: &mut Facts) {
    let mut files = present(
        dir,
        &[
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "uv.lock",
            "poetry.lock",
            "Pipfile",
            "Pipfile.lock",
        ],
    );
    files.extend(
        entries
            .iter()
            .filter(|(n, d)| !d && n.starts_with("requirements") && n.ends_with(".txt"))
            .map(|(n, _)| n.clone()),
    );
    if files.is_empty() {
        return;
    }
    let has = |n: &str| files.iter().any(|f| f == n);
    let mut scripts = Vec::new();
    let (mut poetry, mut uv) = (false, false);
    if has("pyproject.toml")
        && let Some(t) = toml_table(dir, "pyproject.toml", &mut f.problems)
    {
        scripts = keys(t.get("project").and_then(|p| p.get("scripts")));
        let tool = t.get("tool");
        let poetry_scripts = keys(
            tool.and_then(|x| x.get("poetry"))
                .and_then(|x| x.get("scripts")),
        );
        for s in poetry_scripts {
            if !scripts.contains(&s) {
                scripts.push(s);
            }
        }
        poetry = tool.and_then(|x| x.get("poetry")).is_some();
        uv = tool.and_then(|x| x.get("uv")).is_some();
    }
    let (tool, decided_by, note): (&'static str, String, Option<&str>) = if has("uv.lock") {
        ("uv", "uv.lock".into(), None)
    } else if has("poetry.lock") {
        ("poetry", "poetry.lock".into(), None)
    } else if has("Pipfile.lock") {
        ("pipenv", "Pipfile.lock".into(), None)
    } else if has("Pipfile") {
        ("pipenv", "Pipfile".into(), Some("no lockfile"))
    } else if poetry {
        (
            "poetry",
            "pyproject.toml".into(),
            Some("[tool.poetry] in pyproject.toml; no lockfile"),
        )
    } else if uv {
        (
            "uv",
            "pyproject.toml".into(),
            Some("[tool.uv] in pyproject.toml; no lockfile"),
        )
    } else {
        ("pip", files[0].clone(), Some("no lockfile; pip assumed"))
    };
    let mut b = BuildSystem::new("python", tool, &decided_by);
    b.note = note.map(str::to_owned);
    b.files = files;
    if !scripts.is_empty() {
        set_names(
            &mut b,
            "entry_points",
            scripts,
            (dir, "pyproject.toml"),
            &mut f.problems,
        );
    }
    f.build_systems.push(b);
}

pub(super) fn go(dir: &ProjectDir<'_>, f: &mut Facts) {
    if !dir.exists("go.mod") {
        return;
    }
    let mut b = BuildSystem::new("go", "go", "go.mod");
    b.files = present(dir, &["go.mod", "go.sum", "go.work"]);
    let mut version = None;
    if let Some(t) = text(dir, "go.mod", &mut f.problems) {
        for line in t.lines().map(str::trim) {
            if let Some(m) = line.strip_prefix("module ") {
                b.note = Some(format!("module {}", one_line(m, VALUE_MAX_BYTES)));
            } else if let Some(v) = line.strip_prefix("go ") {
                version = Some(one_line(v, VALUE_MAX_BYTES));
            }
        }
    }
    f.build_systems.push(b);
    f.version_hints.push(VersionHint {
        file: "go.mod".to_owned(),
        tool: "go",
        value: version,
    });
}

pub(super) fn make(dir: &ProjectDir<'_>, f: &mut Facts) {
    let files = present(dir, MAKEFILES);
    let Some(first) = files.first().cloned() else {
        return;
    };
    let mut b = BuildSystem::new("make", "make", &first);
    b.files = files;
    match dir.read(&first) {
        Ok(Some(bytes)) => {
            let targets = makefile::targets(&crate::primitives::text::lossy(&bytes));
            set_names(&mut b, "targets", targets, (dir, &first), &mut f.problems);
        }
        Ok(None) => {}
        Err(e) => f.problems.push(dir.problem(
            &first,
            format!(
                "{}; its targets are not listed and have no aliases",
                e.message
            ),
        )),
    }
    f.build_systems.push(b);
}

/// CMake, Gradle and Maven: detected by their files; no names.
pub(super) fn simple(dir: &ProjectDir<'_>, f: &mut Facts) {
    let cmake = present(dir, &["CMakeLists.txt", "CMakePresets.json"]);
    if cmake.iter().any(|n| n == "CMakeLists.txt") {
        let mut b = BuildSystem::new("cmake", "cmake", "CMakeLists.txt");
        b.files = cmake;
        f.build_systems.push(b);
    }
    let gradle = present(
        dir,
        &[
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "settings.gradle.kts",
            "gradlew",
        ],
    );
    if let Some(first) = gradle.first() {
        let wrapper = gradle.iter().any(|n| n == "gradlew");
        let mut b = if wrapper {
            BuildSystem::new("gradle", "./gradlew", "gradlew")
        } else {
            BuildSystem::new("gradle", "gradle", first)
        };
        b.files = gradle;
        f.build_systems.push(b);
    }
    let maven = present(dir, &["pom.xml", "mvnw"]);
    if let Some(first) = maven.first() {
        let wrapper = maven.iter().any(|n| n == "mvnw");
        let mut b = if wrapper {
            BuildSystem::new("maven", "./mvnw", "mvnw")
        } else {
            BuildSystem::new("maven", "mvn", first)
        };
        b.files = maven;
        f.build_systems.push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lockfile_decides_and_package_manager_breaks_ties() {
        let d = decide_node(&["pnpm-lock.yaml"], Some("yarn@4"));
        assert_eq!(
            (d.tool, d.decided_by, d.note),
            ("pnpm", "pnpm-lock.yaml", None)
        );
        let d = decide_node(&["bun.lockb"], None);
        assert_eq!((d.tool, d.decided_by), ("bun", "bun.lockb"));
        let d = decide_node(&["npm-shrinkwrap.json"], None);
        assert_eq!(d.tool, "npm");

        let d = decide_node(&["package-lock.json", "yarn.lock"], Some("yarn@1.22.0"));
        assert_eq!((d.tool, d.decided_by), ("yarn", "yarn.lock"));
        assert!(d.note.unwrap().contains("packageManager chose"));
        let d = decide_node(&["package-lock.json", "yarn.lock"], None);
        assert_eq!((d.tool, d.decided_by), ("npm", "package-lock.json"));
        assert!(d.note.unwrap().contains("the first decides"));

        let d = decide_node(&[], Some("pnpm@9.1.0"));
        assert_eq!((d.tool, d.decided_by), ("pnpm", "package.json"));
        assert!(d.note.unwrap().contains("pnpm@9.1.0"));
        let d = decide_node(&[], Some("deno@2"));
        assert_eq!(d.tool, "npm");
        let d = decide_node(&[], None);
        assert_eq!((d.tool, d.decided_by), ("npm", "package.json"));
    }
}
