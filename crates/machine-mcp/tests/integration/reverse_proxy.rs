//! The relay behind a real reverse proxy (issue 15 item 5): Debian's nginx with default
//! buffering and `proxy_read_timeout 60s` in front of the relay, the daemon's WebSocket going
//! through it too. A 150 s call delivers its result on the original SSE stream: the relay's SSE
//! responses opt out of buffering (`X-Accel-Buffering: no`) and its 10 s keepalives keep the
//! stream under the read timeout.
//!
//! nginx must be installed (`scripts/test.sh` installs Debian's package when missing). Without
//! it the test fails, unless `MACHINE_MCP_SKIP_NGINX=1` asks to skip it, which it then says on
//! stderr.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    net::{Client, Relay},
    util::Tree,
};

/// How long the call runs: well past nginx's 60 s read timeout.
const CALL_SECS: u64 = 150;

fn nginx_binary() -> Option<PathBuf> {
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// An nginx process with its own prefix directory, stopped on drop.
struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// nginx on a free loopback port forwarding everything to `127.0.0.1:upstream`: MCP with
    /// default buffering, `/daemon/v1/connect` as a WebSocket.
    fn start(bin: &Path, upstream: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Worker processes run as an unprivileged user when started as root: let them in.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let d = dir.path().display();
        let conf = format!(
            r#"
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_read_timeout 60s;
        location /daemon/v1/connect {{
            proxy_pass http://127.0.0.1:{upstream};
            # proxy_set_header here replaces the server's list: repeat it
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
        }}
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
        }}
    }}
}}
"#
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let n = Self { child, port, dir };
        let end = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < end,
                "nginx did not listen on {port}:\n{}",
                n.error_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        n
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    /// SIGTERM (fast shutdown: the master stops its workers); SIGKILL would orphan them.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn behind_nginx_a_150_s_call_delivers_its_result_on_the_original_stream_and_the_daemon_connects_through_it()
 {
    let Some(bin) = nginx_binary() else {
        if std::env::var_os("MACHINE_MCP_SKIP_NGINX").is_some_and(|v| v == "1") {
            eprintln!(
                "SKIPPED behind_nginx_...: no nginx in PATH or /usr/sbin and MACHINE_MCP_SKIP_NGINX=1"
            );
            return;
        }
        panic!(
            "nginx is not installed (Debian: apt-get install nginx; scripts/test.sh does it); \
             MACHINE_MCP_SKIP_NGINX=1 skips this test"
        );
    };
    let relay = Relay::start(&[]);
    let nginx = Nginx::start(&bin, relay.port);
    // The public URL (the relay's proxy) now leads to nginx, which forwards to the relay.
    relay.route_public_to(nginx.port);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let budget = ((CALL_SECS + 60) * 1000).to_string();
    let daemon = relay.daemon(
        state.path(),
        ws.path(),
        Some(&code),
        &["--profile", "agent", "--foreground-budget-ms", &budget],
    );
    relay.wait_ready(1);
    daemon.wait_log("connected to the relay and ready", Duration::from_secs(30));

    let mut c = Client::new(&format!("{}/b/b1/mcp", relay.public()), Some(&token));
    c.timeout = Duration::from_secs(CALL_SECS + 120);
    c.initialize();
    let script = format!("sleep {CALL_SECS}; echo done > finished; echo survived");
    let mut stream = c.post_stream(&json!({"jsonrpc": "2.0", "id": 150, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", script],
                   "timeout_seconds": CALL_SECS + 60}}}));
    // The priming event gets through while the process runs: nginx does not hold the stream back.
    let (prime, m) = stream
        .next_message(Duration::from_secs(30))
        .expect("the priming event through nginx");
    assert!(m.is_null() && prime.is_some(), "priming event: {m}");
    assert!(
        !ws.path().join("finished").exists(),
        "the priming event arrived only after the call ended (buffered)"
    );
    let (_, last) = stream
        .next_message(Duration::from_secs(CALL_SECS + 60))
        .unwrap_or_else(|| {
            panic!(
                "no result on the original stream\nnginx:\n{}\nrelay:\n{}",
                nginx.error_log(),
                relay.proc.log()
            )
        });
    assert_eq!(last["id"], 150, "{last}");
    assert_eq!(
        last["result"]["structuredContent"]["exit_code"], 0,
        "{last}"
    );
    assert_eq!(
        last["result"]["structuredContent"]["stdout"], "survived\n",
        "{last}"
    );
    assert!(
        stream.next_message(Duration::from_secs(10)).is_none(),
        "the response is the last event"
    );
    assert_eq!(c.delete(), 200);
    // nginx logs an upgraded connection when it ends: the daemon's WebSocket went through it.
    drop(daemon);
    let end = Instant::now() + Duration::from_secs(20);
    while !nginx
        .access_log()
        .lines()
        .any(|l| l.contains("GET /daemon/v1/connect") && l.contains(" 101 "))
    {
        assert!(
            Instant::now() < end,
            "no upgraded /daemon/v1/connect in nginx's access log:\n{}",
            nginx.access_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
