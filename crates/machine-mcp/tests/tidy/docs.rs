//! Tidy checks of the documents (CONVENTIONS "Docs"): the README stays a map of at most 300
//! lines; the user documents spell the product's names one way and keep the claims other files
//! rely on; every relative link between documents resolves, anchors included; and
//! `docs/reference/cli.md` is exactly what the binary's clap definitions render.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use super::{report, workspace_root};

/// The README's budget (CONVENTIONS "Docs": a map for users, the rest in `docs/`).
const README_MAX_LINES: usize = 300;

/// The committed CLI reference, relative to the workspace root.
const CLI_REFERENCE: &str = "docs/reference/cli.md";

/// The command that rewrites [`CLI_REFERENCE`] from the current sources.
const BLESS: &str = "MACHINE_MCP_BLESS=1 cargo test -p machine-mcp --test tidy cli_reference";

/// The documents written for users and contributors, relative to the workspace root: the
/// README, CONTRIBUTING.md, SECURITY.md and every Markdown file under `docs/`.
fn user_documents() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut docs: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "SECURITY.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("docs/ is readable") {
            let path = entry.expect("a docs/ entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                docs.push(path.strip_prefix(&root).expect("under the root").to_owned());
            }
        }
    }
    docs.sort();
    docs
}

fn read(rel: &Path) -> String {
    fs::read_to_string(workspace_root().join(rel))
        .unwrap_or_else(|e| panic!("tidy: cannot read {}: {e}", rel.display()))
}

#[test]
fn the_readme_is_a_map_of_at_most_300_lines() {
    let lines = read(Path::new("README.md")).lines().count();
    let mut wrong = Vec::new();
    if lines > README_MAX_LINES {
        wrong.push(format!(
            "README.md has {lines} lines (at most {README_MAX_LINES}): move guides to docs/ and \
             contributor matters to CONTRIBUTING.md, and link them"
        ));
    }
    report("the README is a map", &wrong);
}

// The product's names and the claims other files rely on

/// Claims a document must keep, each with the file that relies on it.
const CLAIMS: &[(&str, &str)] = &[
    // The git tools' argument rule (SECURITY.md, "a repository ... never makes the git tools
    // run a program").
    ("docs/tools.md", "revisions that start with `-` are refused"),
    // tests/interop/run.sh drives the TypeScript SDK 1.x (ts-*.mjs) only through `up`.
    (
        "CONTRIBUTING.md",
        "the TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, with a bearer token, OAuth \
         sign-in and stream resumption) through the relay (`machine-mcp up`) only",
    ),
];

#[test]
fn the_documents_name_the_product_and_its_interop_clients_as_they_are() {
    let mut wrong = Vec::new();
    // `machine-mcp` is the command and binary, machine-bridge the project (and its crates).
    for rel in user_documents() {
        let doc = read(&rel);
        for (n, line) in doc.lines().enumerate() {
            for variant in ["machine_mcp", "Machine MCP", "Machine-MCP", "machine mcp"] {
                // `machine_mcp_…` is an identifier (a metric), not a name of the product.
                let named = line
                    .match_indices(variant)
                    .any(|(k, m)| !line[k + m.len()..].starts_with('_'));
                if named {
                    wrong.push(format!(
                        "{}:{}: {variant:?} (write `machine-mcp`)",
                        rel.display(),
                        n + 1
                    ));
                }
            }
            if line.to_ascii_lowercase().contains("machine bridge") {
                wrong.push(format!(
                    "{}:{}: \"machine bridge\" (write machine-bridge)",
                    rel.display(),
                    n + 1
                ));
            }
        }
    }
    for (file, claim) in CLAIMS {
        // Line breaks of the Markdown source do not matter.
        let text = read(Path::new(file))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if !text.contains(claim) {
            wrong.push(format!("{file} does not say {claim:?}"));
        }
    }
    report("the documents name things as they are", &wrong);
}

// Links between documents

/// The text of `md` outside fenced code blocks, with inline code spans blanked (their
/// brackets are not links); line breaks are kept, so offsets still map to lines.
fn prose(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut fenced = false;
    for line in md.lines() {
        if is_fence(line) {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    // Code spans may wrap across lines: a run of N backticks closes at the next run of N.
    let chars: Vec<char> = out.chars().collect();
    let mut result = String::with_capacity(out.len());
    let mut k = 0;
    while k < chars.len() {
        if chars[k] != '`' {
            result.push(chars[k]);
            k += 1;
            continue;
        }
        let run = chars[k..].iter().take_while(|c| **c == '`').count();
        let close = (k + run..chars.len()).find(|&j| {
            chars[j] == '`'
                && chars[j..].iter().take_while(|c| **c == '`').count() == run
                && (j == 0 || chars[j - 1] != '`')
        });
        match close {
            Some(j) => {
                for c in &chars[k..j + run] {
                    result.push(if *c == '\n' { '\n' } else { ' ' });
                }
                k = j + run;
            }
            None => {
                result.extend(&chars[k..k + run]);
                k += run;
            }
        }
    }
    result
}

/// The targets of the inline links (`[text](target)`) and link reference definitions
/// (`[label]: target`) of `md`, each with its line.
fn links(md: &str) -> Vec<(usize, String)> {
    let text = prose(md);
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(k) = rest.find("](") {
            let after = &rest[k + 2..];
            let end = after.find([')', ' ']).unwrap_or(after.len());
            found.push((n + 1, after[..end].trim_matches(['<', '>']).to_owned()));
            rest = &after[end..];
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(k) = trimmed.find("]: ")
        {
            let target = trimmed[k + 3..].split_whitespace().next().unwrap_or("");
            found.push((n + 1, target.to_owned()));
        }
    }
    found
}

/// Whether `line` opens or closes a fenced code block.
fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// The anchors GitHub gives the headings of `md`: the heading's text in lower case, without
/// punctuation but `-` and `_`, spaces as `-`; a repeated one gets `-1`, `-2`, ….
fn anchors(md: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if is_fence(line) {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        out.push(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    out
}

#[test]
fn links_between_documents_resolve() {
    let root = workspace_root();
    let mut wrong = Vec::new();
    for rel in user_documents() {
        let md = read(&rel);
        let dir = rel.parent().unwrap_or(Path::new(""));
        for (line, target) in links(&md) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                rel.clone()
            } else {
                dir.join(path)
            };
            let where_ = format!("{}:{line}: ({target})", rel.display());
            let Ok(full) = root.join(&file).canonicalize() else {
                wrong.push(format!("{where_}: no file {}", file.display()));
                continue;
            };
            if let Some(anchor) = anchor
                && full.extension().is_some_and(|e| e == "md")
            {
                let text = fs::read_to_string(&full).unwrap_or_default();
                if !anchors(&text).iter().any(|a| a == anchor) {
                    wrong.push(format!(
                        "{where_}: no heading #{anchor} in {}",
                        file.display()
                    ));
                }
            }
        }
    }
    report("every relative link between documents resolves", &wrong);
}

// The CLI reference

#[test]
fn the_cli_reference_is_current() {
    let out = Command::new(env!("CARGO_BIN_EXE_machine-mcp"))
        .arg("internal-cli-reference")
        .output()
        .expect("running machine-mcp internal-cli-reference");
    assert!(
        out.status.success(),
        "machine-mcp internal-cli-reference failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh = String::from_utf8(out.stdout).expect("the reference is UTF-8");
    let path = workspace_root().join(CLI_REFERENCE);
    if std::env::var_os("MACHINE_MCP_BLESS").is_some_and(|v| v == "1") {
        fs::create_dir_all(path.parent().expect("a parent")).expect("creating docs/reference");
        fs::write(&path, &fresh).expect("writing the CLI reference");
        return;
    }
    let committed = fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let differs = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(fresh.lines().count()));
        let line = |s: &str| s.lines().nth(differs).unwrap_or("(end of file)").to_owned();
        report(
            "the CLI reference is what the command definitions render",
            &[format!(
                "{CLI_REFERENCE}:{}: is {:?}, the definitions give {:?}; regenerate it with \
                 `{BLESS}` and commit it",
                differs + 1,
                line(&committed),
                line(&fresh)
            )],
        );
    }
}

// The checkers themselves

#[test]
fn links_and_anchors_are_read_as_github_renders_them() {
    let md = "# Title `x`\n\nSee [a](b.md#c-d) and `[not](a-link)`, ``[nor](this\n)``.\n\
              ```sh\n[no](link)\n```\n[ref]: ../x.md\n## C, d?\n## C, d?\n### Relay ⇄ daemon\n";
    let l: Vec<String> = links(md).into_iter().map(|(_, t)| t).collect();
    assert_eq!(l, ["b.md#c-d", "../x.md"]);
    assert_eq!(anchors(md), ["title-x", "c-d", "c-d-1", "relay--daemon"]);
}
