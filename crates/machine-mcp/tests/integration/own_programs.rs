//! The programs the server starts on its own (agent CLIs and their probes, git) never come from
//! a directory a caller with write access but without exec can write: a home-directory-shaped
//! workspace (`HOME` is the workspace, `PATH` starts with its `.local/bin` and `.cargo/bin`)
//! served under the `edit` profile, whose caller overwrites an executable there (an overwrite
//! keeps the file's mode). Each written program would leave a marker file outside the
//! workspace; none may appear.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use serde_json::json;

use crate::util::Server;

/// A home directory served as the workspace, a state directory and a marker directory beside
/// it.
struct Home {
    root: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for d in [
            "home/.local/bin",
            "home/.cargo/bin",
            "home/.config/machine-mcp",
            "out",
        ] {
            std::fs::create_dir_all(root.path().join(d)).unwrap();
        }
        std::fs::write(
            root.path().join("home/.config/machine-mcp/config.toml"),
            "[delegation.agents.codex]\nenabled = true\n",
        )
        .unwrap();
        Self { root }
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// Where a written program leaves its marker.
    fn marker(&self, name: &str) -> PathBuf {
        self.root.path().join("out").join(name)
    }

    /// An executable `#!/bin/sh` script at `rel` under the home (written by the user, not by a
    /// caller).
    fn script(&self, rel: &str, body: &str) -> PathBuf {
        let p = self.home().join(rel);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// `machine-mcp stdio` on the home under `profile`, with the home's bin directories first
    /// on `PATH` and a token in its environment.
    fn server(&self, profile: &str) -> Server {
        let home = self.home();
        let path = format!(
            "{}:{}:{}",
            home.join(".local/bin").display(),
            home.join(".cargo/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let state = self.root.path().join("state").display().to_string();
        let home_s = home.display().to_string();
        let config = home.join(".config").display().to_string();
        Server::start_with_env(
            &home,
            &[
                "--profile",
                profile,
                "--state-dir",
                &state,
                "--no-supervisor",
            ],
            &[
                ("HOME", &home_s),
                ("PATH", &path),
                ("XDG_CONFIG_HOME", &config),
                ("GITHUB_TOKEN", "the-server-token"),
            ],
        )
    }
}

/// A script body that records its environment in `marker`, then prints `answer`.
fn recording(marker: &Path, answer: &str) -> String {
    format!("#!/bin/sh\nenv > '{}'\necho '{answer}'\n", marker.display())
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o111 != 0
}

#[test]
fn an_agent_cli_an_edit_caller_overwrote_is_not_run_by_agents_status() {
    let h = Home::new();
    let codex = h.script(".local/bin/codex", "echo 'codex-cli 1.0.0'");
    let mut s = h.server("edit");
    let marker = h.marker("codex-ran");
    s.call(
        "write_file",
        json!({"path": ".local/bin/codex", "content": recording(&marker, "codex-cli 6.6.6")}),
    )
    .ok();
    assert!(is_executable(&codex), "the overwrite kept the mode");
    let status = s.call("agents_status", json!({}));
    assert!(
        !marker.exists(),
        "agents_status ran the program the caller wrote, with: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    let agents = status.ok()["agents"].as_array().unwrap().clone();
    let codex = agents.iter().find(|a| a["agent"] == "codex").unwrap();
    assert_eq!(codex["available"], false, "{codex}");
    assert!(codex["executable"].is_null(), "{codex}");
    assert!(
        codex["not_ready"]
            .as_str()
            .is_some_and(|r| r.contains("skipped") && r.contains("writable workspace")),
        "{codex}"
    );
}

#[test]
fn git_an_edit_caller_overwrote_on_path_is_not_run_by_git_status() {
    let h = Home::new();
    let real_git = which("git");
    let git = h.script(
        ".local/bin/git",
        &format!("exec '{}' \"$@\"", real_git.display()),
    );
    let ok = std::process::Command::new(&real_git)
        .args(["init", "-q"])
        .current_dir(h.home())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut s = h.server("edit");
    assert!(!s.call("git_status", json!({})).is_error);
    let marker = h.marker("git-ran");
    let body = format!(
        "#!/bin/sh\nenv > '{}'\nexec '{}' \"$@\"\n",
        marker.display(),
        real_git.display()
    );
    s.call(
        "write_file",
        json!({"path": ".local/bin/git", "content": body}),
    )
    .ok();
    assert!(is_executable(&git));
    let r = s.call("git_status", json!({}));
    assert!(
        !marker.exists(),
        "git_status ran the git the caller wrote, with: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    assert!(
        !r.is_error,
        "git from outside the workspace still runs: {}",
        r.error
    );
}

#[test]
fn agents_status_probes_get_the_isolated_environment() {
    let h = Home::new();
    // Outside the workspace: the user's own CLI, found and run; it records what it was given.
    let bin = h.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = h.marker("probe-env");
    let stub = bin.join("codex");
    std::fs::write(&stub, recording(&marker, "codex-cli 1.0.0")).unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = h.home();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let state = h.root.path().join("state").display().to_string();
    let home_s = home.display().to_string();
    let mut s = Server::start_with_env(
        &home,
        &[
            "--profile",
            "edit",
            "--state-dir",
            &state,
            "--no-supervisor",
        ],
        &[
            ("HOME", &home_s),
            ("PATH", &path),
            ("GITHUB_TOKEN", "the-server-token"),
            ("OPENAI_API_KEY", "the-agents-own-key"),
        ],
    );
    s.call("agents_status", json!({})).ok();
    let env = std::fs::read_to_string(&marker).expect("the probe ran");
    assert!(!env.contains("the-server-token"), "{env}");
    assert!(env.contains("the-agents-own-key"), "{env}");
}

/// The absolute path of `name` on this process's `PATH`.
fn which(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not on PATH"))
}
