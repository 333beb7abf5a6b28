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
description = "Its cwd leaves the workspace through a symlink"
argv = ["pwd"]
cwd = "out"

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
    std::os::unix::fs::symlink("/", t.path().join("out")).unwrap();
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
        assert!(r.text.len() <= runtime::limits::PROJECT_OVERVIEW_MAX_BYTES);
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
    assert!(full.text.len() <= runtime::limits::PROJECT_OVERVIEW_MAX_BYTES);
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
    // The one problem: escape's cwd leaves the workspace (a symlink to /) for this caller.
    let problems = l["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{l}");
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("[commands.escape]: cwd out"),
        "{l}"
    );
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
        vec![b'#'; runtime::limits::PROJECT_FILE_MAX_BYTES + 1],
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

fn names_of(list: &Value) -> Vec<String> {
    list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Fresh tester finding 3: past 512 commands the list was cut without a way on (and the text
/// claimed structuredContent had every command), and the commands past the cut could not run.
#[test]
fn every_command_is_listed_page_by_page_and_each_runs_by_name() {
    let t = Tree::new();
    let scripts: serde_json::Map<String, Value> = (0..1_200)
        .map(|i| (format!("s{i:04}"), json!("true")))
        .collect();
    t.write("package.json", json!({"scripts": scripts}).to_string());
    let makefile: String = (0..700)
        .map(|i| format!("t{i:04}:\n\t@echo target {i}\n"))
        .collect();
    t.write("Makefile", makefile);
    t.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let total = 4 + 1_200 + 700;
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let mut seen = Vec::new();
    let mut offset = 0u64;
    for _ in 0..100 {
        let r = s.call("list_commands", json!({"offset": offset}));
        let l = r.ok();
        assert_eq!(l["total"], total, "{}", r.summary());
        assert_eq!(l["offset"], offset);
        let names = names_of(l);
        assert!(
            !names.is_empty() && names.len() <= runtime::limits::COMMANDS_MAX,
            "{}",
            names.len()
        );
        // The text shows every command of the page, and claims nothing more.
        for n in &names {
            assert!(r.body().contains(&format!("{n} — ")), "{n} not in the text");
        }
        assert!(!r.text.contains("lists every command"), "{}", r.summary());
        seen.extend(names);
        match l.get("next_offset").and_then(Value::as_u64) {
            Some(next) => {
                assert_eq!(
                    next,
                    offset + l["commands"].as_array().unwrap().len() as u64
                );
                assert!(
                    r.summary().contains(&format!("\"offset\": {next}")),
                    "{}",
                    r.summary()
                );
                offset = next;
            }
            None => {
                assert!(r.summary().ends_with("; complete"), "{}", r.summary());
                break;
            }
        }
    }
    assert_eq!(seen.len(), total);
    let distinct: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), total, "each command once");
    for n in ["cargo.test", "npm.s1199", "make.t0000", "make.t0699"] {
        assert!(seen.iter().any(|s| s == n), "{n}");
    }
    let run = s.call("run_command", json!({"name": "make.t0699"}));
    assert_eq!(run.ok()["stdout"], "target 699\n", "{}", run.text);
    let past = s.call("list_commands", json!({"offset": total}));
    assert_eq!(past.ok()["commands"], json!([]));

    let o = s.call("project_overview", json!({"detail": "full"}));
    let o = o.ok();
    assert_eq!(o["commands_total"], total);
    assert_eq!(system(o, "make")["names_total"], 700);
}

/// Fresh tester finding 5: callers without an exec mode were told to use run_command.
#[test]
fn callers_without_an_exec_mode_are_not_told_to_call_run_command() {
    let t = fixture();
    for (profile, can_run) in [("review", false), ("edit", false), ("agent", true)] {
        let mut s = Server::start(t.path(), &["--profile", profile]);
        let l = s.call("list_commands", json!({}));
        assert_eq!(l.ok()["run_command_allowed"], can_run, "{profile}");
        let o = s.call("project_overview", json!({}));
        assert_eq!(o.ok()["run_command_allowed"], can_run, "{profile}");
        let b = s.call("session_bootstrap", json!({}));
        let project = b.ok()["project"].as_str().unwrap().to_owned();
        // Every text still names the commands.
        assert!(l.body().contains("greet — Say hello"), "{}", l.text);
        assert!(o.body().contains("greet"), "{}", o.text);
        assert!(project.contains("greet"), "{project}");
        let invites = [
            l.summary().contains("run one with run_command"),
            o.text.contains("run_command runs one"),
            project.contains("to try with run_command"),
        ];
        let denied = "run_command needs an exec mode this policy does not allow";
        if can_run {
            assert_eq!(
                invites,
                [true; 3],
                "{profile}: {}\n{}\n{project}",
                l.summary(),
                o.text
            );
        } else {
            assert_eq!(
                invites,
                [false; 3],
                "{profile}: {}\n{}\n{project}",
                l.summary(),
                o.text
            );
            assert!(l.summary().contains(denied), "{}", l.summary());
            assert!(o.text.contains(denied), "{}", o.text);
            assert!(project.contains(denied), "{project}");
        }
    }
}

/// Fresh tester finding 7: a cwd that leaves the workspace was listed as a normal command,
/// its run error showed an absolute path, and `cwd = "/etc"` broke the manifest while
/// `cwd = "../.."` did not.
#[test]
fn a_manifest_cwd_is_checked_for_the_caller_when_listed_and_shown_relative_when_run() {
    let t = fixture();
    t.write(
        ".machine-mcp/commands.toml",
        "[commands.escape]\ndescription = \"d\"\nargv = [\"pwd\"]\ncwd = \"out\"\n\
         [commands.gone]\ndescription = \"d\"\nargv = [\"pwd\"]\ncwd = \"missing\"\n\
         [commands.file]\ndescription = \"d\"\nargv = [\"pwd\"]\ncwd = \"README.md\"\n\
         [commands.fine]\ndescription = \"d\"\nargv = [\"pwd\"]\ncwd = \"sub\"\n",
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_commands", json!({}));
    let l = r.ok();
    let problems = l["problems"].to_string();
    for (name, why) in [
        ("escape", "resolves outside the workspace"),
        ("gone", "no such directory"),
        ("file", "not a directory"),
    ] {
        let c = command(l, name);
        let problem = c["cwd_problem"].as_str().unwrap_or_else(|| panic!("{c}"));
        assert!(problem.contains(why), "{name}: {problem}");
        assert!(
            problems.contains(&format!("[commands.{name}]: cwd ")),
            "{name}: {problems}"
        );
    }
    assert!(command(l, "fine").get("cwd_problem").is_none(), "{l}");
    assert!(r.body().contains("cannot run"), "{}", r.text);
    let root = t.path().canonicalize().unwrap();
    let escape = s.call("run_command", json!({"name": "escape"}));
    assert_eq!(escape.code(), "path_boundary", "{}", escape.error);
    let message = escape.error["message"].as_str().unwrap();
    assert!(message.starts_with("out: "), "{message}");
    assert!(
        !escape.text.contains(root.to_str().unwrap()),
        "{}",
        escape.text
    );
    // run_command refuses each with the reason list_commands gave.
    for (name, code) in [("gone", "not_found"), ("file", "invalid_request")] {
        let r = s.call("run_command", json!({"name": name}));
        assert_eq!(r.code(), code, "{name}: {}", r.error);
        assert_eq!(
            r.error["message"].as_str().unwrap(),
            command(l, name)["cwd_problem"].as_str().unwrap()
        );
    }
    let fine = s.call("run_command", json!({"name": "fine"}));
    assert_eq!(
        Path::new(fine.ok()["stdout"].as_str().unwrap().trim()),
        root.join("sub")
    );
    drop(s);

    // An unrestricted caller may follow the symlink: no problem for it.
    let mut s = Server::start(t.path(), &["--profile", "full"]);
    let l = s.call("list_commands", json!({}));
    assert!(command(l.ok(), "escape").get("cwd_problem").is_none());
    drop(s);

    // A cwd that leaves the project root by its text is a manifest error, like an absolute one.
    let mut s = Server::start(t.path(), &["--profile", "full"]);
    for cwd in ["/etc", "../..", "sub/../../x"] {
        t.write(
            ".machine-mcp/commands.toml",
            format!("[commands.a]\ndescription = \"d\"\nargv = [\"pwd\"]\ncwd = {cwd:?}\n"),
        );
        let l = s.call("list_commands", json!({}));
        let l = l.ok();
        let message = l["problems"][0]["message"].as_str().unwrap();
        assert!(
            message.starts_with("[commands.a]: cwd must be"),
            "{cwd}: {message}"
        );
        assert!(names_of(l).iter().all(|n| n != "a"), "{cwd}");
    }
}

/// Fresh tester finding 11: with more top-level entries than one listing reads, the overview
/// showed a sorted sample as if it were the directory's first names.
#[test]
fn an_overview_of_a_huge_root_says_its_top_level_names_are_a_sample() {
    let t = Tree::new();
    for i in 0..10_050 {
        t.write(&format!("top{i:05}.txt"), "");
    }
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    for detail in ["summary", "full"] {
        let r = s.call("project_overview", json!({"detail": detail}));
        assert_eq!(r.ok()["top_level_complete"], false);
        let line = r
            .body()
            .lines()
            .find(|l| l.starts_with("top level"))
            .unwrap()
            .to_owned();
        assert!(
            line.starts_with(
                "top level: more than 10000 entries; the first 10000 read (in directory \
                 order, not sorted), of which the first"
            ),
            "{line}"
        );
    }
}

/// Fresh tester finding 12: with a broken manifest, every unknown name got the manifest's
/// error, even names the manifest cannot hold.
#[test]
fn with_a_broken_manifest_an_unknown_name_says_both_what_is_missing_and_what_is_broken() {
    let t = fixture();
    t.write(
        ".machine-mcp/commands.toml",
        "[commands.deploy]\ndescription = \"d\"\nargv = [\"echo\"]\nshell = true\n",
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    for (name, code) in [
        ("npm.nope", "not_found"),
        ("make.nope", "not_found"),
        ("cargo.nope", "not_found"),
        ("deploy", "invalid_request"),
    ] {
        let r = s.call("run_command", json!({"name": name}));
        assert_eq!(r.code(), code, "{name}: {}", r.error);
        let message = r.error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("no registered command {name:?}")),
            "{message}"
        );
        assert!(
            message.contains("unknown field `shell`") && message.contains("cannot run"),
            "{message}"
        );
    }
}

/// Fresh tester finding 14: a script named `--version` became `npm run --version`, which runs
/// npm's own flag.
#[test]
fn names_starting_with_a_dash_get_no_alias_and_a_problem_says_why() {
    let t = Tree::new();
    t.write(
        "package.json",
        r#"{"scripts": {"--version": "echo v", "-c": "echo c", "ok": "echo ok"}}"#,
    );
    t.write("Makefile", "-x:\n\ttrue\nfine:\n\ttrue\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_commands", json!({}));
    let l = r.ok();
    let mut names = names_of(l);
    names.sort();
    assert_eq!(names, ["make.fine", "npm.ok"]);
    let problem = |path: &str| {
        l["problems"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == path)
            .map(|p| p["message"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("no problem about {path}: {l}"))
    };
    let p = problem("package.json");
    assert!(p.contains("\"--version\"") && p.contains("\"-c\""), "{p}");
    assert!(p.starts_with("2 scripts start with \"-\""), "{p}");
    assert!(problem("Makefile").contains("\"-x\""));
    let run = s.call("run_command", json!({"name": "npm.--version"}));
    assert_eq!(run.code(), "not_found");
}

/// Fresh tester finding 6: in a monorepo, `path` naming a package gave the root's list with no
/// word that the package's own package.json is not used.
#[test]
fn a_nested_package_says_its_files_are_not_used_and_the_root_is() {
    let t = Tree::new();
    t.write("package.json", r#"{"scripts": {"root-build": "true"}}"#);
    t.write(
        "packages/web/package.json",
        r#"{"scripts": {"dev": "true"}}"#,
    );
    t.write("packages/web/Makefile", "all:\n\ttrue\n");
    t.write("packages/web/src/app.js", "");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let nested = json!(["packages/web/package.json", "packages/web/Makefile"]);
    let r = s.call("list_commands", json!({"path": "packages/web/src"}));
    let l = r.ok();
    assert_eq!(names_of(l), ["npm.root-build"]);
    assert_eq!(l["nested_project_files"], nested);
    assert!(
        r.text.contains("from the project root only")
            && r.text.contains("packages/web/package.json"),
        "{}",
        r.text
    );
    let o = s.call("project_overview", json!({"path": "packages/web"}));
    assert_eq!(o.ok()["nested_project_files"], nested);
    assert!(o.text.contains("from the project root only"), "{}", o.text);
    let root = s.call("list_commands", json!({}));
    assert_eq!(root.ok()["nested_project_files"], json!([]));
    let run = s.call(
        "run_command",
        json!({"name": "npm.dev", "path": "packages/web"}),
    );
    assert_eq!(run.code(), "not_found");
    assert!(
        run.error["message"]
            .as_str()
            .unwrap()
            .contains("packages/web/package.json"),
        "{}",
        run.error
    );
}
