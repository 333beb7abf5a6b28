//! Issue 18: project facts (`project_overview`) and registered commands (`list_commands`,
//! `run_command`) on fixture repositories, through the real binary.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::util::{Server, Tree};

/// Text that appears only in script bodies, recipes and dependency values of the fixture:
/// no result may show it.
const SECRET: &str = "SECRET_BODY";

const MANIFEST: &str = r#"
[commands.greet]
description = "Say hello"
argv = ["echo", "hello"]

[commands.echo-args]
description = "Echo what it is given"
argv = ["echo", "args:"]
allow_extra_args = true
timeout_seconds = 30

[commands."make.build"]
description = "The manifest's build wins over the makefile's"
argv = ["echo", "manifest build"]

[commands.in-sub]
description = "Runs in sub/"
argv = ["pwd"]
cwd = "sub"

[commands.escape]
description = "Its cwd leaves the workspace"
argv = ["pwd"]
cwd = "../.."

[commands.slow]
description = "Outlives the foreground budget"
argv = ["sh", "-c", "sleep 4; echo done"]
"#;

/// A repository with a tiny crate, a tiny npm package, a makefile, CI, version hints, docs and
/// a command manifest, committed on `main`, with one untracked file.
fn fixture() -> Tree {
    let t = Tree::new();
    t.write(
        "Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\n# SECRET_BODY\n",
    );
    t.write(
        "src/lib.rs",
        "#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(1 + 1, 2);\n    }\n}\n",
    );
    t.write(
        "package.json",
        r#"{"name": "tiny", "version": "1.0.0",
            "scripts": {"hello": "node -e \"console.log('hi from ' + 'npm')\"",
                        "build": "node -e \"console.log('SECRET_BODY')\""},
            "devDependencies": {"left-pad": "SECRET_BODY"}}"#,
    );
    t.write(
        "package-lock.json",
        r#"{"name": "tiny", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
            "packages": {"": {"name": "tiny", "version": "1.0.0"}}}"#,
    );
    t.write(
        "Makefile",
        "CC = cc\n.PHONY: all build\nall: build\nbuild:\n\techo SECRET_BODY\n%.o: %.c\n\t$(CC) -c $<\n",
    );
    t.write(".github/workflows/ci.yml", "on: push\n");
    t.write(".nvmrc", "20\n");
    t.write(".python-version", "3.12\n");
    t.write("README.md", "# tiny\n");
    t.write("AGENTS.md", "Run the tests.\n");
    t.write("docs/guide.md", "guide\n");
    t.write("sub/.keep", "");
    t.write(".machine-mcp/commands.toml", MANIFEST);
    t.write(".gitignore", "target/\nnode_modules/\n");
    git(t.path(), &["init", "-q", "-b", "main"]);
    git(t.path(), &["add", "-A"]);
    git(t.path(), &["commit", "-q", "-m", "initial commit"]);
    t.write("scratch.txt", "untracked\n");
    t
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?}");
}

fn system<'a>(overview: &'a Value, ecosystem: &str) -> &'a Value {
    overview["build_systems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["ecosystem"] == ecosystem)
        .unwrap_or_else(|| panic!("no {ecosystem} in {overview}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn command<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no command {name} in {list}"))
}

#[test]
fn the_overview_reports_git_build_systems_names_ci_hints_and_docs_but_no_bodies() {
    let t = fixture();
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    for detail in ["summary", "full"] {
        let r = s.call("project_overview", json!({"detail": detail}));
        let o = r.ok();
        assert_eq!(o["project_root"], ".");
        assert_eq!(o["detail"], detail);
        let repo = &o["repository"];
        assert_eq!(repo["branch"], "main", "{o}");
        assert_eq!(repo["subject"], "initial commit");
        assert!(
            repo["head"].as_str().is_some_and(|h| h.len() >= 7),
            "{repo}"
        );
        assert_eq!(repo["dirty"], 1, "scratch.txt is untracked");
        let node = system(o, "node");
        assert_eq!(node["tool"], "npm");
        assert_eq!(node["decided_by"], "package-lock.json");
        let mut scripts = strings(&node["names"]);
        scripts.sort();
        assert_eq!(scripts, ["build", "hello"]);
        assert_eq!(system(o, "cargo")["names"], json!(["tiny"]));
        assert_eq!(system(o, "make")["decided_by"], "Makefile");
        assert_eq!(system(o, "make")["names"], json!(["all", "build"]));
        assert_eq!(o["ci"], json!([".github/workflows/ci.yml"]));
        let hints: Vec<(String, String)> = o["version_hints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["file"].as_str().unwrap().to_owned(),
                    h["value"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        assert!(hints.contains(&(".nvmrc".into(), "20".into())), "{hints:?}");
        assert!(hints.contains(&(".python-version".into(), "3.12".into())));
        for doc in ["README.md", "AGENTS.md", "docs/"] {
            assert!(strings(&o["docs"]).contains(&doc.to_owned()), "{doc}");
        }
        assert!(strings(&o["commands"]).contains(&"greet".to_owned()));
        // The text says the same, within its bound, and no body or dependency value appears.
        assert!(r.text.len() <= protocol::limits::PROJECT_OVERVIEW_MAX_BYTES);
        assert!(!r.text.contains(SECRET), "{}", r.text);
        assert!(!o.to_string().contains(SECRET), "{o}");
        for needle in [
            "branch main",
            "npm; decided by package-lock.json",
            "hello",
            ".github/workflows/ci.yml",
            ".nvmrc (node 20)",
            "AGENTS.md",
        ] {
            assert!(r.text.contains(needle), "{needle} missing from {}", r.text);
        }
    }
}

#[test]
fn the_overview_text_stays_within_its_bound_and_says_when_it_was_cut() {
    let t = Tree::new();
    let scripts: serde_json::Map<String, Value> = (0..400)
        .map(|i| (format!("script-{i:03}-{}", "x".repeat(150)), json!("true")))
        .collect();
    t.write("package.json", json!({"scripts": scripts}).to_string());
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let summary = s.call("project_overview", json!({}));
    let o = summary.ok();
    assert_eq!(system(o, "node")["names_total"], 400);
    assert_eq!(system(o, "node")["names"].as_array().unwrap().len(), 10);
    assert!(summary.text.contains("(+390 more)"), "{}", summary.text);
    assert_eq!(o["text_cut"], false);

    let full = s.call("project_overview", json!({"detail": "full"}));
    let o = full.ok();
    assert_eq!(system(o, "node")["names"].as_array().unwrap().len(), 400);
    assert_eq!(o["text_cut"], true);
    assert!(full.text.len() <= protocol::limits::PROJECT_OVERVIEW_MAX_BYTES);
    assert!(
        full.text.contains("[cut at the 16 KiB bound"),
        "{}",
        full.text
    );
}

#[test]
fn manifest_commands_and_aliases_are_listed_with_their_provenance() {
    let t = fixture();
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let r = s.call("list_commands", json!({}));
    let l = r.ok();
    assert_eq!(l["problems"], json!([]), "{l}");
    let greet = command(l, "greet");
    assert_eq!(greet["argv"], json!(["echo", "hello"]));
    assert_eq!(greet["source"], "manifest");
    assert_eq!(greet["provenance"], ".machine-mcp/commands.toml");
    assert_eq!(greet["allow_extra_args"], false);
    assert_eq!(greet["timeout_seconds"], 120);
    assert_eq!(command(l, "echo-args")["timeout_seconds"], 30);
    assert_eq!(command(l, "in-sub")["cwd"], "sub");
    for sub in ["build", "test", "check", "clippy"] {
        let c = command(l, &format!("cargo.{sub}"));
        assert_eq!(c["argv"], json!(["cargo", sub]));
        assert_eq!(c["provenance"], "Cargo.toml");
    }
    let hello = command(l, "npm.hello");
    assert_eq!(hello["argv"], json!(["npm", "run", "hello"]));
    assert_eq!(hello["provenance"], "package.json");
    assert_eq!(hello["source"], "alias");
    assert_eq!(command(l, "make.all")["argv"], json!(["make", "all"]));
    assert_eq!(command(l, "make.all")["provenance"], "Makefile");
    // A manifest name wins over the alias of the same name, which is not listed twice.
    assert_eq!(command(l, "make.build")["source"], "manifest");
    let names: Vec<&str> = l["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.iter().filter(|n| **n == "make.build").count(), 1);
    assert_eq!(l["total"], names.len());
    assert!(r.text.contains("npm.hello"), "{}", r.text);
    assert!(!r.text.contains(SECRET) && !l.to_string().contains(SECRET));
}

#[test]
fn cargo_test_and_npm_script_aliases_run() {
    let t = fixture();
    let target = tempfile::tempdir().unwrap();
    let target_dir = target.path().to_str().unwrap();
    let mut s = Server::start_with_env(
        t.path(),
        &["--profile", "agent", "--full-env"],
        &[("CARGO_TARGET_DIR", target_dir)],
    );
    let r = s.call(
        "run_command",
        json!({"name": "cargo.test", "args": ["--offline"]}),
    );
    let out = r.ok();
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(
        out["stdout"]
            .as_str()
            .unwrap()
            .contains("test tests::adds ... ok"),
        "{out}"
    );
    assert!(r.summary().starts_with("run_command: exited with code 0"));
    assert!(
        target.path().join("debug").is_dir(),
        "built in CARGO_TARGET_DIR"
    );
    assert!(!t.path().join("target").exists(), "not in the fixture");

    let r = s.call("run_command", json!({"name": "npm.hello"}));
    let out = r.ok();
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(
        out["stdout"].as_str().unwrap().contains("hi from npm"),
        "{out}"
    );

    let r = s.call("run_command", json!({"name": "in-sub"}));
    let pwd = r.ok()["stdout"].as_str().unwrap().trim().to_owned();
    assert_eq!(
        Path::new(&pwd).canonicalize().unwrap(),
        t.path().join("sub").canonicalize().unwrap()
    );
}

#[test]
fn extra_args_and_timeouts_follow_the_command() {
    let t = fixture();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let refused = s.call("run_command", json!({"name": "greet", "args": ["x"]}));
    assert_eq!(refused.code(), "invalid_request");
    assert!(
        refused.error["message"]
            .as_str()
            .unwrap()
            .contains("does not allow extra arguments"),
        "{}",
        refused.error
    );
    let passed = s.call(
        "run_command",
        json!({"name": "echo-args", "args": ["one", "two words"]}),
    );
    assert_eq!(passed.ok()["stdout"], "args: one two words\n");

    let raised = s.call(
        "run_command",
        json!({"name": "echo-args", "timeout_seconds": 31}),
    );
    assert_eq!(raised.code(), "invalid_request");
    assert!(
        raised.error["message"]
            .as_str()
            .unwrap()
            .contains("never raise"),
        "{}",
        raised.error
    );
    let alias_raised = s.call(
        "run_command",
        json!({"name": "make.all", "timeout_seconds": 121}),
    );
    assert_eq!(alias_raised.code(), "invalid_request");
    let lowered = s.call(
        "run_command",
        json!({"name": "echo-args", "timeout_seconds": 5}),
    );
    assert_eq!(lowered.ok()["stdout"], "args:\n");

    // A manifest's cwd is confined like any path of the caller's.
    let escape = s.call("run_command", json!({"name": "escape"}));
    assert_eq!(escape.code(), "path_boundary", "{}", escape.error);

    let unknown = s.call("run_command", json!({"name": "test"}));
    assert_eq!(unknown.code(), "not_found");
    assert!(
        unknown.error["message"]
            .as_str()
            .unwrap()
            .contains("cargo.test"),
        "similar names are suggested: {}",
        unknown.error
    );
}

#[test]
fn a_manifest_with_an_unknown_field_is_refused_by_name_and_aliases_still_run() {
    let t = fixture();
    t.write(
        ".machine-mcp/commands.toml",
        "[commands.deploy]\ndescription = \"d\"\nargv = [\"echo\", \"deploy\"]\nshell = true\n",
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let l = s.call("list_commands", json!({}));
    let l = l.ok();
    let problems = l["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{l}");
    assert_eq!(problems[0]["path"], ".machine-mcp/commands.toml");
    let message = problems[0]["message"].as_str().unwrap();
    assert!(
        message.contains("[commands.deploy]") && message.contains("unknown field `shell`"),
        "{message}"
    );
    assert!(
        l["commands"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["source"] == "alias")
    );

    let refused = s.call("run_command", json!({"name": "deploy"}));
    assert_eq!(refused.code(), "invalid_request");
    assert!(
        refused.error["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `shell`"),
        "{}",
        refused.error
    );
    let alias = s.call("run_command", json!({"name": "make.all"}));
    let out = alias.ok();
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(out["stdout"].as_str().unwrap().contains("echo SECRET_BODY"));
}

#[test]
fn a_package_json_that_is_not_json_is_a_problem_and_the_rest_is_served() {
    let t = Tree::new();
    t.write("package.json", "{ \"scripts\": { \"build\": ");
    t.write("yarn.lock", "");
    t.write("Makefile", "check:\n\ttrue\n");
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let r = s.call("list_commands", json!({}));
    let l = r.ok();
    let problems = l["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["path"] == "package.json"
            && p["message"].as_str().unwrap().contains("not valid JSON")),
        "{l}"
    );
    assert_eq!(command(l, "make.check")["argv"], json!(["make", "check"]));
    assert!(r.text.contains("not valid JSON"), "{}", r.text);

    let o = s.call("project_overview", json!({}));
    let o = o.ok();
    let node = system(o, "node");
    assert_eq!(node["tool"], "yarn");
    assert_eq!(node["names"], json!([]));
    assert!(o["problems"].to_string().contains("not valid JSON"), "{o}");
    assert!(o.get("repository").is_none(), "no repository: {o}");

    // A makefile over the bound is a problem too; the other aliases stay.
    t.write(
        "Makefile",
        vec![b'#'; protocol::limits::PROJECT_FILE_MAX_BYTES + 1],
    );
    t.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let l = s.call("list_commands", json!({}));
    let l = l.ok();
    assert!(
        l["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == "Makefile"
                && p["message"].as_str().unwrap().contains("larger than")),
        "{l}"
    );
    let names = l["commands"].to_string();
    assert!(!names.contains("make."), "{names}");
    assert_eq!(command(l, "cargo.test")["argv"], json!(["cargo", "test"]));
}

#[test]
fn review_neither_lists_nor_runs_commands_but_reads_them() {
    let t = fixture();
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let list = s.request("tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"run_command"), "{names:?}");
    assert!(names.contains(&"list_commands") && names.contains(&"project_overview"));
    let r = s.call("run_command", json!({"name": "greet"}));
    assert_eq!(r.code(), "policy_denied");
}

#[test]
fn a_long_run_command_becomes_a_task_for_a_client_with_tasks() {
    let t = fixture();
    let mut s = Server::spawn(t.path(), &["--profile", "agent"]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "project-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let r = s.request(
        "tools/call",
        json!({"name": "run_command", "arguments": {"name": "slow"}, "_meta": meta}),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let g = s.request("tasks/get", json!({"taskId": id, "_meta": meta}));
        if g["result"]["status"] != "working" || Instant::now() > deadline {
            break g;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["stdout"],
        "done\n"
    );
}
