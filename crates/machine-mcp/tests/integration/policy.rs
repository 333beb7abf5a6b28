//! What each policy lists and allows.

use serde_json::json;

use crate::util::{Server, Tree};

fn tool_names(s: &mut Server) -> Vec<String> {
    s.request("tools/list", json!({}))["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

const READ_TOOLS: [&str; 14] = [
    "server_info",
    "list_dir",
    "list_files",
    "read_file",
    "view_image",
    "search_text",
    "session_bootstrap",
    "agent_context",
    "project_overview",
    "list_skills",
    "load_skill",
    "list_commands",
    "search",
    "fetch",
];
const WRITE_TOOLS: [&str; 3] = ["write_file", "edit_file", "apply_patch"];
const ARGV_TOOLS: [&str; 14] = [
    "run_process",
    "run_command",
    "start_process",
    "read_process",
    "write_process",
    "kill_process",
    "list_processes",
    "git_commit",
    "start_job",
    "stage_job",
    "read_job",
    "list_jobs",
    "cancel_job",
    "list_local_resources",
];
const GIT_READ_TOOLS: [&str; 4] = ["git_status", "git_diff", "git_log", "git_show"];

#[test]
fn each_profile_lists_what_it_allows() {
    let t = Tree::new();
    for (args, writes, argv, shell, name) in [
        (vec!["--profile", "full"], true, true, true, "full"),
        (vec!["--profile", "agent"], true, true, false, "agent"),
        (vec!["--profile", "edit"], true, false, false, "edit"),
        (vec!["--profile", "review"], false, false, false, "review"),
        (
            vec!["--profile", "agent", "--no-write"],
            false,
            true,
            false,
            "custom",
        ),
        (
            vec!["--profile", "review", "--exec-mode", "shell"],
            false,
            true,
            true,
            "custom",
        ),
    ] {
        let mut s = Server::start(t.path(), &args);
        let names = tool_names(&mut s);
        let has = |n: &str| names.contains(&n.to_owned());
        for r in READ_TOOLS.iter().chain(&GIT_READ_TOOLS) {
            assert!(has(r), "{args:?} lists {r}");
        }
        for w in WRITE_TOOLS {
            assert_eq!(has(w), writes, "{args:?} and {w}");
        }
        for p in ARGV_TOOLS {
            assert_eq!(has(p), argv, "{args:?} and {p}");
        }
        assert_eq!(has("exec_command"), shell, "{args:?} and exec_command");
        let info = s.call("server_info", json!({})).ok().clone();
        assert_eq!(info["policy"]["profile"], name, "{args:?}");
        assert_eq!(info["tools"].as_array().unwrap().len(), names.len());
    }
}

#[test]
fn process_tools_outside_the_exec_mode_are_policy_denied() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    assert_eq!(
        s.call("run_process", json!({"argv": ["touch", "x"]}))
            .code(),
        "policy_denied"
    );
    assert_eq!(
        s.call("start_process", json!({"argv": ["touch", "x"]}))
            .code(),
        "policy_denied"
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    assert_eq!(
        s.call("exec_command", json!({"command": "touch x"})).code(),
        "policy_denied"
    );
    assert!(!t.path().join("x").exists());
}

#[test]
fn a_write_under_review_is_policy_denied_and_writes_nothing() {
    let t = Tree::new();
    t.write("f.txt", "a\n");
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let r = s.call("write_file", json!({"path": "f.txt", "content": "b\n"}));
    assert_eq!(r.code(), "policy_denied");
    let r = s.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Delete File: f.txt\n*** End Patch"}),
    );
    assert_eq!(r.code(), "policy_denied");
    assert_eq!(t.read("f.txt"), b"a\n");
}

#[test]
fn every_tool_is_fully_described() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let list = s.request("tools/list", json!({}));
    for tool in list["result"]["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap();
        assert!(tool["title"].is_string(), "{name} title");
        assert!(
            tool["description"].as_str().unwrap().len() > 40,
            "{name} description"
        );
        let input = &tool["inputSchema"];
        assert_eq!(input["type"], "object", "{name}");
        assert_eq!(
            input["additionalProperties"], false,
            "{name} input schema is closed"
        );
        jsonschema::validator_for(input).unwrap_or_else(|e| panic!("{name} input schema: {e}"));
        // Portable across client validators: no schemars-only formats, no nullable arguments.
        let text = tool.to_string();
        assert!(
            !text.contains("\"format\":\"uint") && !text.contains("\"format\":\"int"),
            "{name}: {text}"
        );
        assert!(
            !input.to_string().contains("\"null\""),
            "{name} input schema has a null type"
        );
        let ann = &tool["annotations"];
        for k in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(ann[k].is_boolean(), "{name} annotation {k}");
        }
        if name != "view_image" {
            assert_eq!(
                tool["outputSchema"]["type"], "object",
                "{name} output schema"
            );
        }
    }
}

#[test]
fn cli_rejects_bad_flags_with_a_usage_error() {
    let t = Tree::new();
    let out = std::process::Command::new(crate::util::bin())
        .args(["stdio", "--profile", "root"])
        .arg("--workspace")
        .arg(t.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values"));
    let out = std::process::Command::new(crate::util::bin())
        .args(["stdio", "--workspace", "/definitely/not/here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/definitely/not/here"));
    assert!(out.stdout.is_empty(), "nothing on stdout");
}
