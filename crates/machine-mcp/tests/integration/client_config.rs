//! `machine-mcp client-config`: the real binary editing copies of real-format client config
//! files under a fake home (HOME, XDG_CONFIG_HOME and APPDATA point into a temporary directory).

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use indexmap::IndexMap;
use serde_json::{Value, json};

use crate::util::{Tree, bin};

/// A fake home directory and a workspace.
struct Env {
    home: Tree,
    workspace: Tree,
}

impl Env {
    fn new() -> Self {
        Self {
            home: Tree::new(),
            workspace: Tree::new(),
        }
    }

    /// Runs `machine-mcp client-config ARGS` in the workspace with the fake home.
    fn run(&self, args: &[&str]) -> Output {
        let home = self.home.path();
        Command::new(bin())
            .arg("client-config")
            .args(args)
            .current_dir(self.workspace.path())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("APPDATA", home.join("AppData"))
            .env_remove("CODEX_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("MACHINE_MCP_WORKSPACE")
            .output()
            .unwrap()
    }

    /// The client's config file under the fake home (this OS's standard location).
    fn config(&self, client: &str) -> PathBuf {
        let home = self.home.path();
        let app_config = if cfg!(target_os = "macos") {
            home.join("Library/Application Support")
        } else {
            home.join(".config")
        };
        match client {
            "claude-desktop" => app_config.join("Claude/claude_desktop_config.json"),
            "claude-code" => home.join(".claude.json"),
            "cursor" => home.join(".cursor/mcp.json"),
            "codex" => home.join(".codex/config.toml"),
            "vscode" => app_config.join("Code/User/mcp.json"),
            other => panic!("unknown client {other}"),
        }
    }

    /// The `stdio` arguments for the workspace with `--profile agent`.
    fn stdio_args(&self) -> Value {
        let ws = fs::canonicalize(self.workspace.path()).unwrap();
        json!([
            "stdio",
            "--workspace",
            ws.to_str().unwrap(),
            "--profile",
            "agent"
        ])
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The backups next to `file`.
fn backups(file: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}.bak-", file.file_name().unwrap().to_str().unwrap());
    let mut found: Vec<PathBuf> = fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    found.sort();
    found
}

/// The command our entry names: this binary.
fn assert_is_this_binary(command: &str) {
    assert_eq!(
        fs::canonicalize(command).unwrap(),
        fs::canonicalize(bin()).unwrap(),
        "the entry must start this binary"
    );
}

const CLAUDE_DESKTOP: &str = r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/me/Desktop",
        "/Users/me/Downloads"
      ]
    }
  },
  "globalShortcut": "Ctrl+Space"
}
"#;

const CLAUDE_CODE: &str = r#"{
  "numStartups": 42,
  "installMethod": "npm",
  "autoUpdates": true,
  "tipsHistory": {
    "new-user-warmup": 1,
    "memory-command": 5
  },
  "mcpServers": {
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {
        "Authorization": "Bearer ghp_example"
      }
    },
    "sentry": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@sentry/mcp-server"],
      "env": {}
    }
  },
  "projects": {
    "/home/me/repo": {
      "allowedTools": [],
      "history": [{"display": "fix the \u00e9 bug", "pastedContents": {}}],
      "mcpServers": {},
      "hasTrustDialogAccepted": true,
      "lastCost": 0.1250
    }
  },
  "userID": "0123abcd"
}
"#;

const CURSOR: &str = r#"{
  "mcpServers": {
    "linear": {
      "url": "https://mcp.linear.app/sse"
    }
  }
}
"#;

// VS Code writes tabs.
const VSCODE: &str = "{\n\t\"servers\": {\n\t\t\"github\": {\n\t\t\t\"type\": \"http\",\n\t\t\t\"url\": \"https://api.githubcopilot.com/mcp/\"\n\t\t}\n\t},\n\t\"inputs\": [\n\t\t{\n\t\t\t\"type\": \"promptString\",\n\t\t\t\"id\": \"api-key\",\n\t\t\t\"description\": \"API key\",\n\t\t\t\"password\": true\n\t\t}\n\t]\n}\n";

const CODEX: &str = r#"# Codex settings, edited by hand
model = "gpt-5-codex"
approval_policy = "on-request"

[mcp_servers.other]
command = "npx"
args = ["-y", "other-server"] # pinned below
env = { "API_KEY" = "k" }

[profiles.x]
model = "o3"
model_reasoning_effort = "high"
"#;

/// Writes `fixture` as `client`'s file (mode 0640), runs `--write --profile agent`, and checks:
/// our entry is `shape(this binary, stdio args)`, every other member is equal and in its place,
/// the backup holds the old bytes, the mode is kept; a second run changes nothing.
fn json_round_trip(client: &str, fixture: &str, key: &str, shape: fn(&str, Value) -> Value) {
    let env = Env::new();
    let file = env.config(client);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, fixture).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();

    let out = env.run(&["--client", client, "--write", "--profile", "agent"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("added \"machine\""), "{said}");
    assert!(said.contains(file.to_str().unwrap()), "{said}");

    let written = fs::read_to_string(&file).unwrap();
    let mut new: IndexMap<String, Value> = serde_json::from_str(&written).unwrap();
    let mut new_servers: IndexMap<String, Value> =
        serde_json::from_value(new[key].clone()).unwrap();
    let ours = new_servers.shift_remove("machine").expect("our entry");
    let command = ours["command"].as_str().unwrap();
    assert_is_this_binary(command);
    assert_eq!(ours, shape(command, env.stdio_args()));

    // Everything else: equal, and in the same order.
    let mut old: IndexMap<String, Value> = serde_json::from_str(fixture).unwrap();
    let old_servers: IndexMap<String, Value> = serde_json::from_value(old[key].clone()).unwrap();
    assert_eq!(
        new_servers.iter().collect::<Vec<_>>(),
        old_servers.iter().collect::<Vec<_>>()
    );
    new.shift_remove(key);
    old.shift_remove(key);
    assert_eq!(
        new.iter().collect::<Vec<_>>(),
        old.iter().collect::<Vec<_>>()
    );

    let baks = backups(&file);
    assert_eq!(baks.len(), 1, "{baks:?}");
    assert_eq!(fs::read(&baks[0]).unwrap(), fixture.as_bytes());
    assert!(said.contains(baks[0].to_str().unwrap()), "{said}");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o640);
    assert_eq!(mode(&baks[0]), 0o640);

    let again = env.run(&["--client", client, "--write", "--profile", "agent"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stdout(&again).contains("unchanged"), "{}", stdout(&again));
    assert_eq!(fs::read_to_string(&file).unwrap(), written);
    assert_eq!(backups(&file).len(), 1);
}

#[test]
fn claude_desktop_write_keeps_the_other_servers_and_settings() {
    json_round_trip(
        "claude-desktop",
        CLAUDE_DESKTOP,
        "mcpServers",
        |command, args| json!({"command": command, "args": args}),
    );
}

#[test]
fn claude_code_write_keeps_projects_settings_and_other_servers() {
    json_round_trip(
        "claude-code",
        CLAUDE_CODE,
        "mcpServers",
        |command, args| json!({"type": "stdio", "command": command, "args": args, "env": {}}),
    );
}

#[test]
fn cursor_write_keeps_the_other_server() {
    json_round_trip(
        "cursor",
        CURSOR,
        "mcpServers",
        |command, args| json!({"command": command, "args": args}),
    );
}

#[test]
fn vscode_write_keeps_inputs_and_the_other_server() {
    json_round_trip(
        "vscode",
        VSCODE,
        "servers",
        |command, args| json!({"type": "stdio", "command": command, "args": args}),
    );
}

/// A TOML item as JSON, to compare documents by meaning.
fn toml_json(item: &toml_edit::Item) -> Value {
    use toml_edit::{Item, Value as V};
    fn value(v: &V) -> Value {
        match v {
            V::String(s) => json!(s.value()),
            V::Integer(i) => json!(i.value()),
            V::Float(f) => json!(f.value()),
            V::Boolean(b) => json!(b.value()),
            V::Datetime(d) => json!(d.value().to_string()),
            V::Array(a) => Value::Array(a.iter().map(value).collect()),
            V::InlineTable(t) => t.iter().map(|(k, v)| (k.to_owned(), value(v))).collect(),
        }
    }
    match item {
        Item::None => Value::Null,
        Item::Value(v) => value(v),
        Item::Table(t) => t
            .iter()
            .map(|(k, v)| (k.to_owned(), toml_json(v)))
            .collect(),
        Item::ArrayOfTables(a) => a
            .iter()
            .map(|t| toml_json(&Item::Table(t.clone())))
            .collect(),
    }
}

#[test]
fn codex_write_keeps_settings_comments_and_other_tables() {
    let env = Env::new();
    let file = env.config("codex");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, CODEX).unwrap();

    let out = env.run(&["--client", "codex", "--write", "--profile", "agent"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("added \"machine\""),
        "{}",
        stdout(&out)
    );

    let written = fs::read_to_string(&file).unwrap();
    for line in CODEX.lines().filter(|l| l.contains('#')) {
        assert!(written.contains(line), "lost {line:?}:\n{written}");
    }
    let mut new: toml_edit::Document = written.parse().unwrap();
    let ours = new["mcp_servers"]
        .as_table_mut()
        .unwrap()
        .remove("machine")
        .expect("our entry");
    let ours = toml_json(&ours);
    assert_is_this_binary(ours["command"].as_str().unwrap());
    assert_eq!(
        ours,
        json!({"command": ours["command"], "args": env.stdio_args()})
    );
    let old: toml_edit::Document = CODEX.parse().unwrap();
    assert_eq!(toml_json(new.as_item()), toml_json(old.as_item()));

    let baks = backups(&file);
    assert_eq!(baks.len(), 1, "{baks:?}");
    assert_eq!(fs::read(&baks[0]).unwrap(), CODEX.as_bytes());

    let again = env.run(&["--client", "codex", "--write", "--profile", "agent"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stdout(&again).contains("unchanged"), "{}", stdout(&again));
    assert_eq!(fs::read_to_string(&file).unwrap(), written);
    assert_eq!(backups(&file).len(), 1);
}

/// `--write` on `client`'s file holding `bad`: exit 1, the file named on stderr with a
/// position, the bytes untouched, no backup.
fn assert_refused(client: &str, bad: &str, why: &str) {
    let env = Env::new();
    let file = env.config(client);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, bad).unwrap();
    let out = env.run(&["--client", client, "--write"]);
    assert_eq!(out.status.code(), Some(1), "{client}: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(file.to_str().unwrap()), "{client}: {err}");
    assert!(err.contains("line "), "{client}: no position: {err}");
    assert!(err.contains(why), "{client}: {err}");
    assert!(err.contains("left untouched"), "{client}: {err}");
    assert_eq!(fs::read(&file).unwrap(), bad.as_bytes(), "{client}");
    assert!(backups(&file).is_empty(), "{client}");
}

#[test]
fn a_corrupt_file_is_left_untouched_without_a_backup() {
    for (client, fixture) in [
        ("claude-desktop", CLAUDE_DESKTOP),
        ("claude-code", CLAUDE_CODE),
        ("cursor", CURSOR),
        ("vscode", VSCODE),
    ] {
        let truncated = &fixture[..fixture.len() / 2];
        assert_refused(client, truncated, "not valid JSON");
    }
    assert_refused(
        "codex",
        "model = \"o3\"\n[mcp_servers.other\ncommand = \"x\"\n",
        "not valid TOML",
    );
}

#[test]
fn a_server_map_of_the_wrong_type_is_refused() {
    assert_refused(
        "claude-desktop",
        "{\"globalShortcut\": \"\", \"mcpServers\": []}",
        "is an array, not an object",
    );
    assert_refused(
        "vscode",
        "{\n  \"servers\": \"none\"\n}\n",
        "is a string, not an object",
    );
}

#[test]
fn a_vscode_file_with_comments_is_refused_untouched() {
    let jsonc = "{\n\t// my servers\n\t\"servers\": {}\n}\n";
    assert_refused("vscode", jsonc, "comments and trailing commas are not JSON");
}

#[test]
fn remote_entries_carry_the_url_and_the_bearer_header() {
    let env = Env::new();
    let url = "https://relay.example.com/b/laptop/mcp";
    let token = "mbt_secret_example_token";
    let out = env.run(&[
        "--client", "all", "--write", "--remote", "--url", url, "--token", token,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains(token), "token on stderr");
    let read =
        |c: &str| -> Value { serde_json::from_slice(&fs::read(env.config(c)).unwrap()).unwrap() };
    let bearer = format!("Bearer {token}");
    assert_eq!(
        read("claude-code")["mcpServers"]["machine"],
        json!({"type": "http", "url": url, "headers": {"Authorization": bearer}})
    );
    assert_eq!(
        read("cursor")["mcpServers"]["machine"],
        json!({"url": url, "headers": {"Authorization": bearer}})
    );
    assert_eq!(
        read("vscode")["servers"]["machine"],
        json!({"type": "http", "url": url, "headers": {"Authorization": bearer}})
    );
    let via_mcp_remote = json!({
        "command": "npx",
        "args": ["-y", "mcp-remote", url, "--header", "Authorization:${AUTH_HEADER}"],
        "env": {"AUTH_HEADER": bearer},
    });
    assert_eq!(
        read("claude-desktop")["mcpServers"]["machine"],
        via_mcp_remote
    );
    let codex: toml_edit::Document = fs::read_to_string(env.config("codex"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(toml_json(&codex["mcp_servers"]["machine"]), via_mcp_remote);
}

#[test]
fn missing_files_and_directories_are_created() {
    let env = Env::new();
    let out = env.run(&["--client", "all", "--write", "--name", "box"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    for client in ["claude-desktop", "claude-code", "cursor", "codex", "vscode"] {
        let file = env.config(client);
        assert!(
            said.contains(&format!("{client}: added \"box\" in {}", file.display())),
            "{said}"
        );
        assert!(backups(&file).is_empty());
        let text = fs::read_to_string(&file).unwrap();
        let args = if client == "codex" {
            let doc: toml_edit::Document = text.parse().unwrap();
            toml_json(&doc["mcp_servers"]["box"])["args"].clone()
        } else {
            let key = if client == "vscode" {
                "servers"
            } else {
                "mcpServers"
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v.as_object().unwrap().len(), 1, "{client}: only our entry");
            v[key]["box"]["args"].clone()
        };
        let ws = fs::canonicalize(env.workspace.path()).unwrap();
        assert_eq!(
            args,
            json!(["stdio", "--workspace", ws.to_str().unwrap()]),
            "{client}"
        );
    }
}

#[test]
fn all_reports_every_client_and_fails_when_one_does() {
    let env = Env::new();
    let cursor = env.config("cursor");
    fs::create_dir_all(cursor.parent().unwrap()).unwrap();
    fs::write(&cursor, "{\"mcpServers\": {").unwrap();
    let out = env.run(&["--client", "all", "--write"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("cursor: cannot edit {}", cursor.display())),
        "{err}"
    );
    assert!(err.contains("1 of 5 clients failed"), "{err}");
    for client in ["claude-desktop", "claude-code", "codex", "vscode"] {
        assert!(env.config(client).is_file(), "{client} not written");
        assert!(
            stdout(&out).contains(&format!("{client}: added")),
            "{}",
            stdout(&out)
        );
    }
    assert_eq!(fs::read(&cursor).unwrap(), b"{\"mcpServers\": {");
}

#[test]
fn printing_shows_the_entry_and_its_file_and_writes_nothing() {
    let env = Env::new();
    let out = env.run(&["--client", "cursor", "--profile", "agent"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains(env.config("cursor").to_str().unwrap()),
        "{said}"
    );
    let snippet: Value = serde_json::from_str(&said[said.find('{').unwrap()..]).unwrap();
    assert_eq!(snippet["mcpServers"]["machine"]["args"], env.stdio_args());
    assert_is_this_binary(
        snippet["mcpServers"]["machine"]["command"]
            .as_str()
            .unwrap(),
    );
    assert!(
        fs::read_dir(env.home.path()).unwrap().next().is_none(),
        "wrote something"
    );
}

#[test]
fn config_file_overrides_the_location_for_a_single_client() {
    let env = Env::new();
    let custom = env.home.path().join("elsewhere/mcp.json");
    let custom_s = custom.to_str().unwrap();
    let out = env.run(&["--client", "cursor", "--write", "--config-file", custom_s]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(custom.is_file());
    assert!(!env.config("cursor").exists());
    let out = env.run(&["--client", "all", "--config-file", custom_s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("single --client"), "{}", stderr(&out));
}

#[test]
fn a_symlinked_config_file_is_edited_through_the_link() {
    let env = Env::new();
    let real = env.home.write("dotfiles/cursor-mcp.json", CURSOR);
    let link = env.config("cursor");
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = env.run(&["--client", "cursor", "--write"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let v: Value = serde_json::from_slice(&fs::read(&real).unwrap()).unwrap();
    assert!(v["mcpServers"]["machine"].is_object());
    assert!(v["mcpServers"]["linear"].is_object());
    assert_eq!(backups(&real).len(), 1);
}

// Regression (fresh tester, issue 17 follow-up 9): `--name X` replaced the user's own server
// named X (with a backup, but no warning).
#[test]
fn an_entry_of_that_name_that_is_not_ours_is_replaced_only_with_force() {
    let env = Env::new();
    let file = env.config("claude-desktop");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, CLAUDE_DESKTOP).unwrap();
    let out = env.run(&[
        "--client",
        "claude-desktop",
        "--write",
        "--name",
        "filesystem",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("\"filesystem\" is another server (command `npx`)"),
        "{err}"
    );
    assert!(
        err.contains("choose another --name, or pass --force"),
        "{err}"
    );
    assert!(!err.contains("--config-file"), "{err}");
    assert_eq!(fs::read_to_string(&file).unwrap(), CLAUDE_DESKTOP);
    assert!(backups(&file).is_empty());
    let codex = env.config("codex");
    fs::create_dir_all(codex.parent().unwrap()).unwrap();
    fs::write(&codex, CODEX).unwrap();
    let out = env.run(&["--client", "codex", "--write", "--name", "other"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&codex).unwrap(), CODEX);

    let out = env.run(&[
        "--client",
        "claude-desktop",
        "--write",
        "--name",
        "filesystem",
        "--force",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("replaced \"filesystem\""),
        "{}",
        stdout(&out)
    );
    assert_eq!(backups(&file).len(), 1);
    // Our own entry is replaced without --force when the settings change.
    let out = env.run(&[
        "--client",
        "claude-desktop",
        "--write",
        "--name",
        "filesystem",
        "--profile",
        "review",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("replaced \"filesystem\""),
        "{}",
        stdout(&out)
    );
}

// Regression (fresh tester, issue 17 follow-up 10): `--remote --url ftp://x` was accepted.
#[test]
fn remote_urls_are_https_or_loopback_http() {
    let env = Env::new();
    for (url, why) in [
        (
            "ftp://relay.example.com/b/x/mcp",
            "an MCP URL is http(s), not ftp",
        ),
        (
            "http://relay.example.com/b/x/mcp",
            "use https://relay.example.com/b/x/mcp",
        ),
    ] {
        let out = env.run(&["--client", "cursor", "--remote", "--url", url]);
        assert_eq!(out.status.code(), Some(1), "{url}: {}", stdout(&out));
        assert!(stderr(&out).contains(why), "{url}: {}", stderr(&out));
    }
    for url in [
        "http://127.0.0.1:8750/b/local/mcp",
        "http://localhost:8750/b/local/mcp",
        "http://[::1]:8750/b/local/mcp",
        "https://relay.example.com/b/x/mcp",
    ] {
        let out = env.run(&["--client", "cursor", "--remote", "--url", url]);
        assert!(out.status.success(), "{url}: {}", stderr(&out));
    }
}

// Regression (fresh tester, issue 17 follow-up 13): a config file starting with a UTF-8 BOM was
// refused without naming the BOM.
#[test]
fn a_file_with_a_byte_order_mark_is_refused_naming_it() {
    let env = Env::new();
    for client in ["claude-desktop", "codex"] {
        let file = env.config(client);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        let body = if client == "codex" {
            CODEX
        } else {
            CLAUDE_DESKTOP
        };
        let with_bom = format!("\u{feff}{body}");
        fs::write(&file, &with_bom).unwrap();
        let out = env.run(&["--client", client, "--write"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{client}: {err}");
        assert!(
            err.contains("starts with a UTF-8 byte-order mark (BOM)")
                && err.contains("save it without BOM"),
            "{client}: {err}"
        );
        assert_eq!(fs::read_to_string(&file).unwrap(), with_bom);
    }
}

// Regression (fresh tester, issue 17 follow-up 12): "pass --config-file" was advised when
// --config-file had been given.
#[test]
fn a_refusal_does_not_suggest_the_config_file_flag_that_was_given() {
    let env = Env::new();
    let file = env.home.path().join("my.json");
    fs::write(&file, "{ not json").unwrap();
    let out = env.run(&[
        "--client",
        "cursor",
        "--write",
        "--config-file",
        file.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("--config-file"), "{err}");
    let out = env.run(&["--client", "cursor", "--write"]);
    assert!(out.status.success(), "{}", stderr(&out));
    fs::write(env.config("cursor"), "{ not json").unwrap();
    let out = env.run(&["--client", "cursor", "--write"]);
    assert!(stderr(&out).contains("--config-file"), "{}", stderr(&out));
}

// Regression (fresh tester, issue 17 follow-up 8): `--write` as root on another user's file
// left the new file owned by root.
#[test]
fn the_edited_file_keeps_its_owner_and_group() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    let file = env.config("cursor");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, CURSOR).unwrap();
    let me = fs::metadata(&file).unwrap();
    let owner = if me.uid() == 0 {
        // As root (CI): another user's file.
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
        (65534, 65534)
    } else {
        (me.uid(), me.gid())
    };
    let out = env.run(&["--client", "cursor", "--write"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let now = fs::metadata(&file).unwrap();
    assert_eq!((now.uid(), now.gid()), owner);
    let baks = backups(&file);
    let bak = fs::metadata(&baks[0]).unwrap();
    assert_eq!((bak.uid(), bak.gid()), owner);
}

// Regression (fresh tester, issue 17 follow-up 12): `--write` (this command's) sat next to the
// policy's `--no-write` (the server's) in the help, and the example URL lacked `/b/BRIDGE`.
#[test]
fn the_help_keeps_write_and_the_policy_apart() {
    let env = Env::new();
    let out = env.run(&["--help"]);
    let help = stdout(&out);
    let heading = help
        .find("Policy of the stdio server the entry starts:")
        .unwrap_or_else(|| panic!("{help}"));
    let no_write = help.find("      --no-write").unwrap();
    let write = help.find("      --write").unwrap();
    assert!(write < heading && heading < no_write, "{help}");
    assert!(help.contains("/b/local/mcp"), "{help}");
}
