//! Issue 18 item 1: the instruction chain (`session_bootstrap`, `agent_context`) and the
//! context resources, through the real binary over stdio and through the relay.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{
    net::{Client, Relay},
    util::{Server, Tree},
};

/// A repository with a nested chain: root, package (an override beside its AGENTS.md), target
/// (an empty override, so its AGENTS.md is used), and a CLAUDE.md at the root.
fn nested() -> Tree {
    let t = Tree::new();
    std::fs::create_dir(t.path().join(".git")).unwrap();
    t.write("AGENTS.md", "root: run the tests\n");
    t.write("CLAUDE.md", "claude: be brief\n");
    t.write("pkg/AGENTS.md", "pkg: NOT USED\n");
    t.write("pkg/AGENTS.override.md", "pkg override: use pnpm\n");
    t.write("pkg/src/AGENTS.override.md", "");
    t.write("pkg/src/AGENTS.md", "target: keep functions small\n");
    t.write("pkg/src/lib.rs", "fn main() {}\n");
    t
}

/// A user configuration naming `instructions` (in a fresh `XDG_CONFIG_HOME`).
fn user_config(instructions: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("machine-mcp");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mine.md"), instructions).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[context]\ninstructions = \"mine.md\"\n",
    )
    .unwrap();
    home
}

fn kinds_and_paths(v: &Value) -> Vec<(String, String)> {
    v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_owned(),
                s["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_chain_runs_from_the_project_root_to_the_target_with_provenance() {
    let t = nested();
    let cfg = user_config("user: prefer rg\n");
    let xdg = cfg.path().to_str().unwrap();
    // Unrestricted (so the user file is read), with workspace-relative output.
    let mut s = Server::start_with_env(
        t.path(),
        &["--absolute-paths=false"],
        &[("XDG_CONFIG_HOME", xdg)],
    );
    let r = s.call("agent_context", json!({"path": "pkg/src/lib.rs"}));
    let v = r.ok();
    let user = cfg.path().join("machine-mcp/mine.md");
    assert_eq!(
        kinds_and_paths(v),
        vec![
            (
                "user_instructions".to_owned(),
                std::fs::canonicalize(&user)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned()
            ),
            ("agents".to_owned(), "AGENTS.md".to_owned()),
            ("claude".to_owned(), "CLAUDE.md".to_owned()),
            (
                "agents_override".to_owned(),
                "pkg/AGENTS.override.md".to_owned()
            ),
            ("agents".to_owned(), "pkg/src/AGENTS.md".to_owned()),
        ],
        "lowest precedence first: {v}"
    );
    assert_eq!(v["target"], "pkg/src");
    assert_eq!(v["project_root"], ".");
    let first = &v["sources"][1];
    assert_eq!(first["precedence"], 2);
    assert_eq!(first["applies_to"], ".");
    assert_eq!(first["bytes"], 20);
    use sha2::Digest;
    assert_eq!(
        first["sha256"],
        hex::encode(sha2::Sha256::digest(b"root: run the tests\n"))
    );
    let text = v["text"].as_str().unwrap();
    let order: Vec<usize> = [
        "user: prefer rg",
        "root: run the tests",
        "claude: be brief",
        "pkg override: use pnpm",
        "target: keep functions small",
    ]
    .iter()
    .map(|needle| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle} in {text}"))
    })
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(
        !text.contains("NOT USED"),
        "the override replaces pkg/AGENTS.md"
    );
    let skipped: Vec<(String, String)> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["path"].as_str().unwrap().to_owned(),
                k["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        vec![
            (
                "pkg/AGENTS.md".to_owned(),
                "pkg/AGENTS.override.md takes its place".to_owned()
            ),
            ("pkg/src/AGENTS.override.md".to_owned(), "empty".to_owned()),
        ]
    );
    // The readable text block carries the same chain, headed per source.
    assert!(
        r.body()
            .contains("## 5/5 AGENTS.md — pkg/src/AGENTS.md (applies to pkg/src")
    );
    assert!(r.summary().contains("5 sources"), "{}", r.summary());
}

#[test]
fn a_known_fingerprint_is_answered_unchanged_until_a_file_changes() {
    let t = nested();
    let mut s = Server::start(t.path(), &[]);
    let first = s.call("agent_context", json!({"path": "pkg/src"}));
    let fp = first.ok()["fingerprint"].as_str().unwrap().to_owned();
    let again = s.call(
        "agent_context",
        json!({"path": "pkg/src", "known_fingerprint": fp}),
    );
    assert_eq!(again.ok()["unchanged"], true);
    assert_eq!(again.ok()["text"], "");
    assert!(again.summary().contains("unchanged"), "{}", again.summary());
    t.write("pkg/AGENTS.override.md", "pkg override: use npm\n");
    let changed = s.call(
        "agent_context",
        json!({"path": "pkg/src", "known_fingerprint": fp}),
    );
    assert_eq!(changed.ok()["unchanged"], false);
    assert_ne!(changed.ok()["fingerprint"], json!(fp));
    assert!(changed.ok()["text"].as_str().unwrap().contains("use npm"));
}

#[test]
fn budgets_cut_with_a_note_and_pages_continue_the_chain() {
    let t = Tree::new();
    t.write("AGENTS.md", "r".repeat(40_000));
    t.write("sub/AGENTS.md", "s".repeat(20_000));
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    // Per file: 32 KiB of the root file; the total budget cuts the root file next.
    let r = s.call(
        "agent_context",
        json!({"path": "sub", "max_total_bytes": 30_000}),
    );
    let v = r.ok();
    assert_eq!(v["sources"][1]["included_bytes"], 20_000);
    assert_eq!(v["sources"][1]["truncated"], false);
    assert_eq!(v["sources"][0]["included_bytes"], 10_000);
    assert_eq!(v["sources"][0]["cut_by"], "chain");
    assert!(
        v["text"]
            .as_str()
            .unwrap()
            .contains("[cut by the chain's total budget: 10000 of 40000 bytes shown; read_file \"AGENTS.md\" for the rest]")
    );
    // The default budgets: the root file is cut at 32 KiB; the page stops within the default
    // result size and the cursor continues it, every byte once.
    let mut text = String::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"path": "sub"});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = s.call("agent_context", args);
        assert!(r.text.len() <= 45_000, "{} characters", r.text.len());
        let v = r.ok().clone();
        assert_eq!(v["offset"], text.len());
        text.push_str(v["text"].as_str().unwrap());
        pages += 1;
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert_eq!(v["total_bytes"], text.len());
                break;
            }
        }
    }
    assert_eq!(pages, 2);
    assert!(text.contains(&"r".repeat(32 * 1024)) && !text.contains(&"r".repeat(32 * 1024 + 1)));
    assert!(text.contains(&"s".repeat(20_000)) && !text.contains(&"s".repeat(20_001)));
    assert!(text.contains("[cut by the per-file budget: 32768 of 40000 bytes shown"));
    // A cursor of a chain that changed since is refused.
    let first = s.call("agent_context", json!({"path": "sub"}));
    let c = first.ok()["next_cursor"].as_str().unwrap().to_owned();
    t.write("sub/AGENTS.md", "changed\n");
    let stale = s.call("agent_context", json!({"path": "sub", "cursor": c}));
    assert_eq!(stale.code(), "conflict");
}

#[test]
fn a_huge_agents_md_is_read_within_its_budget() {
    let t = Tree::new();
    let f = std::fs::File::create(t.path().join("AGENTS.md")).unwrap();
    f.set_len(50 * 1024 * 1024).unwrap();
    drop(f);
    // A sparse file of NULs is binary; one of text is cut.
    let mut s = Server::start(t.path(), &[]);
    let r = s.call("agent_context", json!({}));
    assert_eq!(r.ok()["sources"], json!([]));
    assert!(
        r.ok()["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("binary")
    );
    let big = "x".repeat(1024 * 1024);
    let mut f = std::fs::File::create(t.path().join("AGENTS.md")).unwrap();
    for _ in 0..50 {
        std::io::Write::write_all(&mut f, big.as_bytes()).unwrap();
    }
    drop(f);
    let r = s.call("agent_context", json!({}));
    let src = &r.ok()["sources"][0];
    assert_eq!(src["bytes"], 50 * 1024 * 1024);
    assert_eq!(src["included_bytes"], 32 * 1024);
    assert_eq!(src["truncated"], true);
    assert!(src.get("sha256").is_none(), "over 16 MiB is not hashed");
    let b = s.call("session_bootstrap", json!({}));
    assert!(b.text.len() < 45_000);
    assert_eq!(b.ok()["instructions_complete"], false);
}

#[test]
fn session_bootstrap_names_the_server_the_policy_and_the_instructions() {
    let t = nested();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("session_bootstrap", json!({"path": "pkg/src"}));
    let v = r.ok();
    assert!(v["server"].as_str().unwrap().starts_with("machine-mcp "));
    assert!(
        v["policy"]
            .as_str()
            .unwrap()
            .starts_with("profile agent: writes allowed, processes from an argv (no shell), paths confined to the workspace"),
        "{v}"
    );
    assert_eq!(v["instructions_complete"], true);
    assert_eq!(v["instruction_sources"].as_array().unwrap().len(), 4);
    assert!(r.body().contains("target: keep functions small"));
    assert!(r.body().contains("Next: agent_context"));
    // The fingerprint is agent_context's.
    let c = s.call("agent_context", json!({"path": "pkg/src"}));
    assert_eq!(c.ok()["fingerprint"], v["fingerprint"]);
}

#[test]
fn a_confined_caller_never_gets_the_user_file_and_a_broken_config_is_reported() {
    let t = nested();
    let cfg = user_config("user: SECRET PREFERENCES\n");
    let xdg = cfg.path().to_str().unwrap();
    let mut s = Server::start_with_env(
        t.path(),
        &["--profile", "agent"],
        &[("XDG_CONFIG_HOME", xdg)],
    );
    let r = s.call("agent_context", json!({}));
    assert!(!r.text.contains("SECRET"));
    assert!(
        kinds_and_paths(r.ok())
            .iter()
            .all(|(k, _)| k != "user_instructions")
    );
    let listed = s.request("resources/list", json!({}));
    assert!(
        !listed.to_string().contains("user-instructions"),
        "{listed}"
    );
    let read = s.request(
        "resources/read",
        json!({"uri": "machine://context/user-instructions"}),
    );
    assert_eq!(read["error"]["code"], -32002, "{read}");
    drop(s);
    // An unknown key fails closed, named; the rest of the chain is still served.
    std::fs::write(
        cfg.path().join("machine-mcp/config.toml"),
        "[context]\ninstructions = \"mine.md\"\nsecret_key = 1\n",
    )
    .unwrap();
    let mut s = Server::start_with_env(t.path(), &[], &[("XDG_CONFIG_HOME", xdg)]);
    let r = s.call("agent_context", json!({}));
    let problems = r.ok()["problems"].to_string();
    assert!(problems.contains("secret_key"), "{problems}");
    assert_eq!(r.ok()["sources"].as_array().unwrap().len(), 2);
}

#[test]
fn the_instruction_files_are_resources() {
    let t = nested();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    assert!(
        s.init["capabilities"]["resources"].is_object(),
        "{}",
        s.init
    );
    let list = s.request("resources/list", json!({}));
    let uris: Vec<&str> = list["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        vec![
            "machine://context/chain",
            "machine://context/file/AGENTS.md",
            "machine://context/file/CLAUDE.md",
        ]
    );
    let read = |s: &mut Server, uri: &str| s.request("resources/read", json!({"uri": uri}));
    let chain = read(&mut s, "machine://context/chain");
    let text = chain["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.contains("root: run the tests") && text.contains("claude: be brief"));
    // A nested file by the template; a file that is not an instruction file is refused.
    let nested = read(&mut s, "machine://context/file/pkg/AGENTS.override.md");
    assert_eq!(
        nested["result"]["contents"][0]["text"],
        "pkg override: use pnpm\n"
    );
    assert_eq!(nested["result"]["contents"][0]["mimeType"], "text/markdown");
    let other = read(&mut s, "machine://context/file/pkg/src/lib.rs");
    assert_eq!(other["error"]["code"], -32002, "{other}");
    let outside = read(&mut s, "machine://context/file/..%2F..%2Fetc%2FAGENTS.md");
    assert!(outside.get("error").is_some(), "{outside}");
    let templates = s.request("resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"],
        "machine://context/file/{+path}"
    );
}

#[test]
fn a_remote_reviewer_does_not_get_the_owners_user_file() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let owner = relay.token("b1", "owner");
    let reviewer = relay.token("b1", "reviewer");
    let state = tempfile::tempdir().unwrap();
    let t = nested();
    let cfg = user_config("user: THE OWNER'S OWN NOTES\n");
    let daemon = relay.daemon_with_env(
        state.path(),
        t.path(),
        Some(&code),
        &["--profile", "full"],
        &[("XDG_CONFIG_HOME", cfg.path().to_str().unwrap())],
    );
    relay.wait_ready(1);
    daemon.wait_log("connected to the relay and ready", Duration::from_secs(30));
    let url = crate::relay::mcp_url(&relay, "b1");
    let text_of = |token: &str| {
        let mut c = Client::new(&url, Some(token));
        c.initialize();
        let r = c.call("agent_context", json!({}));
        r["result"]["structuredContent"].clone()
    };
    let as_owner = text_of(&owner);
    assert!(
        as_owner["text"]
            .as_str()
            .unwrap()
            .contains("THE OWNER'S OWN NOTES"),
        "{as_owner}"
    );
    let as_reviewer = text_of(&reviewer);
    assert!(
        !as_reviewer.to_string().contains("OWNER'S OWN"),
        "{as_reviewer}"
    );
    assert_eq!(as_reviewer["sources"].as_array().unwrap().len(), 2);
}

/// Fresh tester finding 1: a `max_chars` at the low end of its range gave pages with no text
/// and the same cursor, so a client following it looped for ever.
#[test]
fn every_page_size_the_schema_allows_advances_to_the_end() {
    let t = nested();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let whole = s.call("agent_context", json!({"path": "pkg/src"}));
    let whole = whole.ok()["text"].as_str().unwrap().to_owned();
    let schema = s.request("tools/list", json!({}));
    let min = schema["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "agent_context")
        .unwrap()["inputSchema"]["properties"]["max_chars"]["minimum"]
        .as_u64()
        .unwrap();
    let tiny = s.call(
        "agent_context",
        json!({"path": "pkg/src", "max_chars": min - 1}),
    );
    assert_eq!(tiny.code(), "invalid_request");
    let mut text = String::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let mut args = json!({"path": "pkg/src", "max_chars": min});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = s.call("agent_context", args);
        let v = r.ok().clone();
        let page = v["text"].as_str().unwrap();
        assert!(!page.is_empty() || v["next_cursor"].is_null(), "{v}");
        text.push_str(page);
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(text, whole);
}

/// Fresh tester finding 2: session_bootstrap cut the chain from its end, so the deepest file —
/// the one that wins — was the one left out.
#[test]
fn session_bootstrap_keeps_the_deepest_instructions_whole_first() {
    let t = Tree::new();
    let root: String = (0..400)
        .map(|i| format!("- root guideline {i}: keep the code tidy and the tests green\n"))
        .collect();
    assert!(root.len() > 24_000);
    t.write("AGENTS.md", &root);
    t.write("pkg/AGENTS.md", "IMPORTANT: in pkg never run migrations\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("session_bootstrap", json!({"path": "pkg"}));
    let v = r.ok();
    let instructions = v["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("IMPORTANT: in pkg never run migrations"),
        "{}",
        &instructions[instructions.len().saturating_sub(500)..]
    );
    assert!(instructions.contains("- root guideline 0:"));
    assert!(
        instructions.contains("[cut by"),
        "the root file's cut is noted"
    );
    assert_eq!(v["instructions_complete"], false);
    assert!(instructions.len() <= 24_000 + 500, "{}", instructions.len());
}

/// Fresh tester finding 8: JSON-RPC errors of resources/read and prompts/get echoed a 200 KB
/// argument whole.
#[test]
fn protocol_errors_stay_short_whatever_they_echo() {
    let t = nested();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let long = "A".repeat(200_000);
    let read = s.request(
        "resources/read",
        json!({"uri": format!("machine://context/file/{long}")}),
    );
    let get = s.request("prompts/get", json!({"name": long}));
    for e in [&read, &get] {
        let m = e["error"]["message"].as_str().unwrap();
        assert!(m.len() < 2_000, "{} characters", m.len());
    }
}

/// Fresh tester finding 15: a non-UTF-8 directory name could not be read back through its
/// resource URI, an empty instruction file was an error, and a Latin-1 file said nothing of
/// its replaced bytes.
#[test]
fn resource_uris_name_any_path_and_odd_files_read_as_they_are() {
    use std::os::unix::ffi::OsStrExt;
    let t = Tree::new();
    let dir = t.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("AGENTS.md"), "latin dir\n").unwrap();
    t.write("empty/AGENTS.md", "");
    t.write("latin/AGENTS.md", b"caf\xe9 rules\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let read = |s: &mut Server, uri: &str| s.request("resources/read", json!({"uri": uri}));
    let r = read(&mut s, "machine://context/file/caf%E9/AGENTS.md");
    assert_eq!(r["result"]["contents"][0]["text"], "latin dir\n", "{r}");
    let r = read(&mut s, "machine://context/file/empty/AGENTS.md");
    assert_eq!(r["result"]["contents"][0]["text"], "", "{r}");
    let c = s.call("agent_context", json!({"path": "latin"}));
    let src = &c.ok()["sources"][0];
    assert_eq!(src["invalid_utf8"], true, "{src}");
    assert!(c.ok()["text"].as_str().unwrap().contains("U+FFFD"));
}
