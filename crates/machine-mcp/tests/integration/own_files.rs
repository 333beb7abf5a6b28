//! The server's own files — its configuration, servers file, state directory and service
//! definitions — are out of the tools' reach while paths are confined, when the workspace is a
//! home directory that holds them (`HOME` is the workspace, the XDG directories under it): no
//! caller reads the device key, tokens or job plans, and none changes which programs and
//! upstream servers the server starts at its next load. Walks and listings leave them out and
//! say so. With unrestricted paths (`full`) they are reachable, as every file of the user is.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::{
    net::{Client, Relay, tool_error},
    relay::mcp_url,
    util::Server,
};

/// What a file of the state directory and the configuration hold: a search for it must find
/// nothing.
const SECRET: &str = "SECRET-OWN-FILE";

/// A home directory served as the workspace, holding the server's configuration and state.
struct Home {
    root: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let h = Self { root };
        for (rel, text) in [
            (
                ".config/machine-mcp/config.toml",
                format!("# {SECRET}\n[delegation.agents.codex]\nenabled = true\n"),
            ),
            (".local/state/machine-mcp/up/token", format!("{SECRET}\n")),
            (
                ".local/state/machine-mcp/jobs/j1/plan.json",
                format!("{{\"stdin\": \"{SECRET}\"}}\n"),
            ),
            (".config/other.toml", "other = 1\n".to_owned()),
            ("notes.txt", "notes\n".to_owned()),
        ] {
            h.write(rel, &text);
        }
        h
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.home().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.home().join(rel)).ok()
    }

    /// `HOME` and the XDG directories of a user whose home is the workspace.
    fn env(&self) -> Vec<(&'static str, String)> {
        let home = self.home();
        vec![
            ("HOME", home.display().to_string()),
            (
                "XDG_CONFIG_HOME",
                home.join(".config").display().to_string(),
            ),
            (
                "XDG_STATE_HOME",
                home.join(".local/state").display().to_string(),
            ),
        ]
    }

    /// `machine-mcp stdio` on the home under `profile`, with the default state directory (in
    /// the home) and `extra` arguments.
    fn server(&self, profile: &str, extra: &[&str]) -> Server {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut args = vec!["--profile", profile, "--no-supervisor"];
        args.extend_from_slice(extra);
        Server::start_with_env(&self.home(), &args, &env)
    }
}

/// Asserts that `reply` refuses `path` as one of the server's own files, naming `what`.
fn assert_refused(reply: &crate::util::Reply, path: &str, what: &str) {
    assert_eq!(reply.code(), "path_boundary", "{path}: {}", reply.error);
    let message = reply.error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(what) && message.contains("serve a workspace that does not contain it"),
        "{path}: {message}"
    );
}

/// What the files of a listing or search name: none may be one of the server's own.
fn assert_no_own_path(paths: &[&str]) {
    for p in paths {
        assert!(
            !p.starts_with(".config/machine-mcp") && !p.starts_with(".local/state/machine-mcp"),
            "listed: {p}"
        );
    }
}

fn notes(v: &Value) -> String {
    v["notes"].to_string()
}

#[test]
fn an_edit_caller_neither_reads_nor_changes_the_servers_configuration_and_state() {
    let h = Home::new();
    let config_before = h.read(".config/machine-mcp/config.toml");
    let mut s = h.server("edit", &[]);
    // Reads.
    for (path, what) in [
        (".local/state/machine-mcp/up/token", "state directory"),
        (
            ".local/state/machine-mcp/jobs/j1/plan.json",
            "state directory",
        ),
        (".config/machine-mcp/config.toml", "configuration"),
    ] {
        assert_refused(&s.call("read_file", json!({"path": path})), path, what);
    }
    // Writes: overwrite, create, edit; a service definition of this state directory, which
    // does not exist yet.
    let hostile = "[delegation.agents.codex]\nenabled = true\npath = \"/tmp/evil\"\n";
    for (path, what) in [
        (".config/machine-mcp/config.toml", "configuration"),
        (".config/machine-mcp/servers.json", "configuration"),
        (
            ".local/state/machine-mcp/enrollment.json",
            "state directory",
        ),
        (
            ".config/systemd/user/machine-mcp.service",
            "service definition",
        ),
        (
            "Library/LaunchAgents/dev.machine-bridge.machine-mcp.plist",
            "service definition",
        ),
    ] {
        let r = s.call("write_file", json!({"path": path, "content": hostile}));
        assert_refused(&r, path, what);
    }
    let r = s.call(
        "edit_file",
        json!({"path": ".config/machine-mcp/config.toml", "old_text": "enabled = true",
               "new_text": "enabled = true\npath = \"/tmp/evil\""}),
    );
    assert_refused(&r, "edit_file", "configuration");
    // Patches: update, delete, add, and a move into the state directory.
    for patch in [
        "*** Begin Patch\n*** Update File: .config/machine-mcp/config.toml\n@@\n-enabled = true\n+enabled = false\n*** End Patch\n",
        "*** Begin Patch\n*** Delete File: .local/state/machine-mcp/up/token\n*** End Patch\n",
        "*** Begin Patch\n*** Add File: .local/state/machine-mcp/jobs/j2/plan.json\n+{}\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: notes.txt\n*** Move to: .config/machine-mcp/notes.txt\n@@\n-notes\n+moved\n*** End Patch\n",
    ] {
        let r = s.call("apply_patch", json!({"patch": patch}));
        assert_eq!(r.code(), "path_boundary", "{patch}: {}", r.error);
    }
    assert_eq!(h.read(".config/machine-mcp/config.toml"), config_before);
    assert_eq!(
        h.read(".local/state/machine-mcp/up/token").as_deref(),
        Some(&*format!("{SECRET}\n"))
    );
    for rel in [
        ".config/machine-mcp/servers.json",
        ".local/state/machine-mcp/enrollment.json",
        ".local/state/machine-mcp/jobs/j2/plan.json",
        ".config/machine-mcp/notes.txt",
        ".config/systemd/user/machine-mcp.service",
    ] {
        assert!(h.read(rel).is_none(), "{rel} was written");
    }
    assert_eq!(h.read("notes.txt").as_deref(), Some("notes\n"));
    // Everything beside them is the caller's as before.
    assert_eq!(
        s.call("read_file", json!({"path": "notes.txt"})).ok()["content"],
        "notes\n"
    );
    let r = s.call(
        "write_file",
        json!({"path": ".config/other.toml", "content": "other = 2\n"}),
    );
    assert!(!r.is_error, "{}", r.error);
}

#[test]
fn a_reviewer_reads_no_own_file_and_walks_leave_them_out_with_a_note() {
    let h = Home::new();
    // A link the user made into the state directory does not lead there either.
    std::os::unix::fs::symlink(
        h.home().join(".local/state/machine-mcp"),
        h.home().join("state-link"),
    )
    .unwrap();
    let mut s = h.server("review", &[]);
    for (path, what) in [
        (".local/state/machine-mcp/up/token", "state directory"),
        ("state-link/up/token", "state directory"),
        (".config/machine-mcp/config.toml", "configuration"),
        (".config/machine-mcp", "configuration"),
    ] {
        assert_refused(&s.call("read_file", json!({"path": path})), path, what);
    }
    for path in [
        ".local/state/machine-mcp",
        "state-link",
        ".config/machine-mcp",
    ] {
        let r = s.call("list_files", json!({"path": path}));
        assert_eq!(r.code(), "path_boundary", "{path}: {}", r.error);
    }

    let r = s.call("list_files", json!({"path": ".", "include_ignored": true}));
    let v = r.ok();
    let files: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_no_own_path(&files);
    assert!(files.contains(&"notes.txt"), "{files:?}");
    assert!(files.contains(&".config/other.toml"), "{files:?}");
    let n = notes(v);
    assert!(
        n.contains(".config/machine-mcp left out")
            && n.contains(".local/state/machine-mcp left out"),
        "{n}"
    );
    assert!(
        r.body().contains(".config/machine-mcp left out"),
        "{}",
        r.text
    );

    let r = s.call(
        "search_text",
        json!({"pattern": SECRET, "include_ignored": true}),
    );
    let v = r.ok();
    assert_eq!(v["matches"], json!([]), "{v}");
    assert!(notes(v).contains("left out"), "{v}");

    let r = s.call("list_dir", json!({"path": ".config"}));
    let v = r.ok();
    let names: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["other.toml"], "{v}");
    assert_eq!(v["total_entries"], 1, "{v}");
    assert!(notes(v).contains("machine-mcp left out"), "{v}");
}

#[test]
fn a_state_directory_that_does_not_exist_yet_is_protected_and_full_reaches_everything() {
    let h = Home::new();
    let later = h.home().join("later/state");
    let later_s = later.display().to_string();
    let mut s = h.server("edit", &["--state-dir", &later_s]);
    let r = s.call(
        "write_file",
        json!({"path": "later/state/device-key.pem", "content": "planted\n"}),
    );
    assert_refused(&r, "later/state/device-key.pem", "state directory");
    assert!(!later.join("device-key.pem").exists());
    drop(s);
    // Unrestricted paths: every file of the user is the caller's, these too.
    let mut s = h.server("full", &[]);
    let r = s.call(
        "read_file",
        json!({"path": ".config/machine-mcp/config.toml"}),
    );
    assert!(r.ok()["content"].as_str().unwrap().contains(SECRET));
}

/// A daemon (`connect`) whose state directory and servers file lie in its workspace: an
/// `editor` cannot rewrite the servers file and a `reviewer` cannot read the device key; the
/// owner (`full`) is not confined.
#[test]
fn a_daemons_servers_file_and_device_key_are_out_of_reach_of_confined_roles() {
    let h = Home::new();
    h.write("mcp-servers.json", "{\"mcpServers\": {}}\n");
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let state = h.home().join(".local/state/machine-mcp");
    let servers = h.home().join("mcp-servers.json");
    let env = h.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let daemon = relay.daemon_with_env(
        &state,
        &h.home(),
        Some(&code),
        &["--servers", servers.to_str().unwrap()],
        &env,
    );
    relay.wait_ready(1);
    daemon.wait_log(
        "connected to the relay and ready",
        std::time::Duration::from_secs(30),
    );
    assert!(state.join("daemon/device-key.pem").exists());
    let client = |role: &str| {
        let mut c = Client::new(&mcp_url(&relay, "b1"), Some(&relay.token("b1", role)));
        c.initialize();
        c
    };

    let mut editor = client("editor");
    let r = editor.call(
        "write_file",
        json!({"path": "mcp-servers.json",
               "content": "{\"mcpServers\": {\"x\": {\"command\": \"/tmp/evil\"}}}"}),
    );
    let e = tool_error(&r);
    assert_eq!(e["code"], "path_boundary", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("servers file"),
        "{e}"
    );
    assert_eq!(
        h.read("mcp-servers.json").as_deref(),
        Some("{\"mcpServers\": {}}\n")
    );

    let mut reviewer = client("reviewer");
    let r = reviewer.call(
        "read_file",
        json!({"path": ".local/state/machine-mcp/daemon/device-key.pem"}),
    );
    assert_eq!(tool_error(&r)["code"], "path_boundary", "{r}");
    let r = reviewer.call("list_files", json!({"path": "."}));
    let listed = r["result"]["structuredContent"]["files"].to_string();
    assert!(
        !listed.contains("mcp-servers.json") && !listed.contains("device-key"),
        "{listed}"
    );

    let mut owner = client("owner");
    let r = owner.call("read_file", json!({"path": "mcp-servers.json"}));
    assert_ne!(r["result"]["isError"], true, "{r}");
}
