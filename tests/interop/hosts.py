#!/usr/bin/env python3
"""The host matrix for tests/interop/run.sh (part `hosts`): real MCP hosts, each driven headless
against a mock model endpoint on loopback (mock_model.py), connect to `machine-mcp stdio` and to
`machine-mcp up` over Streamable HTTP with a bearer token, load the tool list and perform one
real tool call; and a strict SSE client for every protocol version.

Subcommands (each check prints `PASS <name>` or `FAIL <name>: <why>`, as interop.py's do; UP is
the file holding the line `machine-mcp up --json --profile review` printed, serving WS):

  matrix WORK BIN UP WS   Claude Code, Gemini CLI and Codex CLI × {`BIN stdio --workspace WS
                          --profile review`, UP's MCP URL with its bearer token}. Per run: a
                          scratch HOME (and CODEX_HOME), the host's own `mcp add` command, its
                          model endpoint pointed at the mock (ANTHROPIC_BASE_URL,
                          GOOGLE_GEMINI_BASE_URL, a Codex model provider's base_url), one
                          prompt. Two checks per run: the tool list (every tool of the review
                          profile reached the model under the host's name for it) and the tool
                          call (the mock asked for `read_file` of a marker file in WS; the tool
                          result that came back holds the file's unique marker).
  strict-sse UP [WS]      a client that parses every SSE `data:` line as JSON, as the TypeScript
                          SDK bundled by Gemini CLI 0.61 does, through UP for each
                          protocol version: 2025-11-25, 2025-06-18 and 2025-03-26 (initialize,
                          tools/list, tools/call, the standalone GET stream, closed by DELETE)
                          and 2026-07-28 (server/discover, tools/list, tools/call). The only
                          event allowed an empty `data:` is the priming event that opens a
                          2025-11-25 stream (and every such stream must open with one). With
                          WS (UP's workspace) the call reads a file written there with a marker.

Env (matrix): INTEROP_NODE (Node 22), INTEROP_NODE_MODULES (tests/interop/package-lock.json's
node_modules). Uses the standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from interop import Checks, check, short
from mock_model import MockModel

# must match tests/interop/package.json
VERSIONS = {"claude-code": "2.1.328", "gemini-cli": "0.61.0", "codex": "0.171.0"}
SERVER = "machine"  # the MCP server's name in every host's configuration
# how each host names an MCP server's tool for the model
PREFIX = {"claude-code": f"mcp__{SERVER}__", "gemini-cli": f"mcp_{SERVER}_", "codex": f"mcp__{SERVER}__"}
MARKER_FILE = "hosts-marker.txt"
RUN_SECS = 120  # one host run: start, load the servers, two model turns, one tool call
CLI_SECS = 60  # one configuration command (`mcp add`, `--version`)
PROMPT = f"Read {MARKER_FILE} with the {SERVER} server's read_file tool."
HTTP_SECS = 60  # one HTTP exchange of the strict client
SESSION_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"]
MODERN = "2026-07-28"
PRIMING_SINCE = "2025-11-25"


# ---------------------------------------------------------------------------------------------
# helpers

def load_up(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text().splitlines()[0])


def base_env(home: Path) -> dict[str, str]:
    """The environment of a host run: ours, less any model credentials or endpoints, with HOME
    (and the XDG directories) in the scratch dir."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "CODEX_", "CLAUDE_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_DATA_HOME=str(home / ".local/share"), NO_COLOR="1")
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], secs: int, log: Path) -> subprocess.CompletedProcess[str]:
    """Runs argv, appending the command and its output to log; raises when it times out."""
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        try:
            r = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=secs, check=False)
        except subprocess.TimeoutExpired as e:
            f.write(f"(timed out after {secs}s)\n{e.stdout or ''}{e.stderr or ''}\n")
            raise AssertionError(f"`{' '.join(argv[:3])} ...` did not end within {secs}s") from None
        f.write(f"{r.stdout}{r.stderr}(exit {r.returncode})\n")
    return r


# ---------------------------------------------------------------------------------------------
# the hosts: each prepares its scratch dirs, adds the server, and runs the prompt

class Host:
    name = ""

    def __init__(self, node: str, modules: Path, root: Path, mock_url: str) -> None:
        self.node, self.modules, self.root, self.mock_url = node, modules, root, mock_url

    def dirs(self, transport: str) -> tuple[Path, Path]:
        d = self.root / f"{self.name}-{transport}"
        (d / "home").mkdir(parents=True, exist_ok=True)
        (d / "project").mkdir(parents=True, exist_ok=True)
        return d / "home", d / "project"

    def argv(self) -> list[str]:
        raise NotImplementedError

    def version(self, log: Path) -> str:
        home, project = self.dirs("version")
        r = run([*self.argv(), "--version"], project, self.env(home, "version"), CLI_SECS, log)
        return (r.stdout + r.stderr).strip()

    def env(self, home: Path, label: str) -> dict[str, str]:
        return base_env(home)

    def add(self, home: Path, project: Path, server: dict[str, Any], log: Path) -> None:
        raise NotImplementedError

    def prompt(self, home: Path, project: Path, label: str, server: dict[str, Any], log: Path) -> None:
        raise NotImplementedError


class ClaudeCode(Host):
    """Claude Code (`@anthropic-ai/claude-code`, native binary): `claude mcp add` into the
    project's local scope; `claude -p` with ANTHROPIC_BASE_URL at the mock, any API key, and the
    MCP tools declared to the model up front (ENABLE_TOOL_SEARCH=false: otherwise they are
    deferred behind its ToolSearch tool), read_file allowed without a prompt."""
    name = "claude-code"

    def argv(self) -> list[str]:
        return [str(self.modules / "@anthropic-ai/claude-code/bin/claude.exe")]

    def env(self, home: Path, label: str) -> dict[str, str]:
        env = base_env(home)
        env.update(DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", ENABLE_TOOL_SEARCH="false",
                   ANTHROPIC_BASE_URL=f"{self.mock_url}/run/{label}", ANTHROPIC_API_KEY="mock-model-key")
        return env

    def add(self, home: Path, project: Path, server: dict[str, Any], log: Path) -> None:
        if "url" in server:
            args = ["mcp", "add", "--transport", "http", SERVER, server["url"],
                    "--header", f"Authorization: Bearer {server['token']}"]
        else:
            args = ["mcp", "add", SERVER, "--", *server["command"]]
        r = run([*self.argv(), *args], project, self.env(home, "add"), CLI_SECS, log)
        check(r.returncode == 0, f"claude mcp add exited {r.returncode}")

    def prompt(self, home: Path, project: Path, label: str, server: dict[str, Any], log: Path) -> None:
        run([*self.argv(), "-p", PROMPT, "--allowedTools", f"{PREFIX[self.name]}read_file"],
            project, self.env(home, label), RUN_SECS, log)


class GeminiCli(Host):
    """Gemini CLI (`@google/gemini-cli`): API-key auth, telemetry and updates off in
    ~/.gemini/settings.json, the project trusted in ~/.gemini/trustedFolders.json (MCP servers
    are off in an untrusted folder), `gemini mcp add --trust` (no confirmation per call; options
    before the positionals except the array options -t/-H, which follow them), `gemini -p` with
    GOOGLE_GEMINI_BASE_URL at the mock and any GEMINI_API_KEY."""
    name = "gemini-cli"

    def argv(self) -> list[str]:
        return [self.node, str(self.modules / "@google/gemini-cli/bundle/gemini.js")]

    def env(self, home: Path, label: str) -> dict[str, str]:
        env = base_env(home)
        # no second Node process with a larger heap: it only doubles the start-up time here
        env.update(GEMINI_CLI_NO_RELAUNCH="true", GOOGLE_GEMINI_BASE_URL=f"{self.mock_url}/run/{label}",
                   GEMINI_API_KEY="mock-model-key")
        return env

    def settings(self, home: Path, project: Path) -> None:
        g = home / ".gemini"
        g.mkdir(parents=True, exist_ok=True)
        (g / "settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        }, indent=2))
        (g / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))

    def add(self, home: Path, project: Path, server: dict[str, Any], log: Path) -> None:
        self.settings(home, project)
        if "url" in server:
            args = ["mcp", "add", "--scope", "user", "--trust", SERVER, server["url"], "-t", "http",
                    "-H", f"Authorization: Bearer {server['token']}"]
        else:
            command = server["command"]
            args = ["mcp", "add", "--scope", "user", "--trust", SERVER, command[0], "--", *command[1:]]
        r = run([*self.argv(), *args], project, self.env(home, "add"), CLI_SECS, log)
        check(r.returncode == 0, f"gemini mcp add exited {r.returncode}")

    def prompt(self, home: Path, project: Path, label: str, server: dict[str, Any], log: Path) -> None:
        run([*self.argv(), "-p", PROMPT], project, self.env(home, label), RUN_SECS, log)


class Codex(Host):
    """Codex CLI (`@openai/codex`): $CODEX_HOME/config.toml names a model provider `mock` whose
    base_url is the mock (wire_api responses, no key); `codex mcp add` (stdio, or --url with
    --bearer-token-env-var); `codex exec --skip-git-repo-check` (approvals never, sandbox
    read-only; MCP calls are not sandboxed)."""
    name = "codex"

    def argv(self) -> list[str]:
        return [self.node, str(self.modules / "@openai/codex/bin/codex.js")]

    def env(self, home: Path, label: str) -> dict[str, str]:
        env = base_env(home)
        env["CODEX_HOME"] = str(home / ".codex")
        return env

    def add(self, home: Path, project: Path, server: dict[str, Any], log: Path) -> None:
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        label = f"{self.name}-{'http' if 'url' in server else 'stdio'}"
        (codex_home / "config.toml").write_text(
            'model = "mock-model"\nmodel_provider = "mock"\n\n'
            '[model_providers.mock]\nname = "mock model"\n'
            f'base_url = "{self.mock_url}/run/{label}/v1"\nwire_api = "responses"\n')
        if "url" in server:
            args = ["mcp", "add", SERVER, "--url", server["url"], "--bearer-token-env-var", "MACHINE_MCP_TOKEN"]
        else:
            args = ["mcp", "add", SERVER, "--", *server["command"]]
        r = run([*self.argv(), *args], project, self.env(home, "add"), CLI_SECS, log)
        check(r.returncode == 0, f"codex mcp add exited {r.returncode}")

    def prompt(self, home: Path, project: Path, label: str, server: dict[str, Any], log: Path) -> None:
        env = self.env(home, label)
        if "token" in server:
            env["MACHINE_MCP_TOKEN"] = server["token"]
        run([*self.argv(), "exec", "--skip-git-repo-check", PROMPT], project, env, RUN_SECS, log)


# ---------------------------------------------------------------------------------------------
# matrix

def review_tools(up: dict[str, Any]) -> list[str]:
    """The tool names of `tools/list` through UP (the review profile), by one JSON session."""
    headers = {"Authorization": f"Bearer {up['token']}", "Content-Type": "application/json",
               "Accept": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "hosts.py", "version": "0"}}}
    status, h, body = post(up["mcp_url"], headers, init)
    check(status == 200, f"initialize through up: HTTP {status} {short(body)}")
    headers["Mcp-Session-Id"] = h.get("mcp-session-id", "")
    headers["MCP-Protocol-Version"] = "2025-11-25"
    post(up["mcp_url"], headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    status, _, body = post(up["mcp_url"], headers, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    names = [t["name"] for t in json.loads(body)["result"]["tools"]]
    check(status == 200 and "read_file" in names, f"tools/list through up: HTTP {status} {short(body)}")
    return names


def cmd_matrix(work: Path, bin_: Path, up_file: Path, ws: Path) -> int:
    checks = Checks()
    node = os.environ.get("INTEROP_NODE", "node")
    modules = Path(os.environ["INTEROP_NODE_MODULES"])
    root = work / "hosts"
    logs = work / "logs"
    root.mkdir(parents=True, exist_ok=True)
    marker = f"machine-mcp-hosts-{secrets.token_hex(8)}"
    (ws / MARKER_FILE).write_text(f"{marker}\n")
    mock = MockModel(MARKER_FILE, marker, SERVER, logs / "hosts-mock-model.jsonl")
    mock_url = f"http://127.0.0.1:{mock.start()}"
    up = load_up(up_file)
    servers = {
        "stdio": {"command": [str(bin_), "stdio", "--workspace", str(ws), "--profile", "review"]},
        "http": {"url": up["mcp_url"], "token": up["token"]},
    }
    tools: list[str] = []

    def setup() -> None:
        tools.extend(review_tools(up))
    checks.run("hosts: the mock model endpoint listens and up lists the review profile's tools",
               setup, lambda: [logs / "up-hosts.log"])
    if not tools:
        return 1

    for cls in (ClaudeCode, GeminiCli, Codex):
        host = cls(node, modules, root, mock_url)
        log = logs / f"hosts-{host.name}.log"

        def check_version(host: Host = host, log: Path = log) -> None:
            version = host.version(log)
            want = VERSIONS[host.name]
            check(want in version.split(), f"--version printed {short(version, 200)!r}, want {want}")
        checks.run(f"hosts {host.name}: version {VERSIONS[host.name]}", check_version, lambda log=log: [log])
        for transport, server in servers.items():
            label = f"{host.name}-{transport}"
            what = "machine-mcp stdio" if transport == "stdio" else "machine-mcp up over HTTP, bearer token"
            ran: dict[str, Any] = {}

            def go(host: Host = host, transport: str = transport, server: dict[str, Any] = server,
                   label: str = label, log: Path = log) -> None:
                home, project = host.dirs(transport)
                host.add(home, project, server, log)
                try:
                    host.prompt(home, project, label, server, log)
                finally:
                    ran.update(mock.record(label))
                want = {PREFIX[host.name] + t for t in tools}
                seen = set().union(*map(set, ran["tools"])) if ran["tools"] else set()
                missing = sorted(want - seen)
                check(not missing, f"{len(missing)} of the {len(want)} tools never reached the model: "
                      f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} (model requests: "
                      f"{len(ran['requests'])}, {sum(1 for n in seen if SERVER in n)} tools of '{SERVER}' declared)")

            checks.run(f"hosts {host.name} {transport} ({what}): the model got the {len(tools)} tools",
                       go, lambda log=log: [log])

            def called(host: Host = host, label: str = label) -> None:
                check(ran, "the host did not run (see above)")
                want = PREFIX[host.name] + "read_file"
                check(ran.get("called") == want, f"the mock found no {want} to call (it called {ran.get('called')})")
                check(ran.get("result_seen"), f"the host called {want} but sent no tool result back to the model")
                check(ran.get("marker_seen"), f"the tool result lacks the marker: {short(ran.get('result_text', ''))}")

            checks.run(f"hosts {host.name} {transport}: a real read_file call through the host returned the "
                       "file's marker", called, lambda log=log: [log])
    mock.stop()
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# strict SSE client

def post(url: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], str]:
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=HTTP_SECS)
    try:
        c.request("POST", u.path, body=json.dumps(body), headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def sse_events(body: str) -> list[list[tuple[str, str]]]:
    """The events of a raw SSE body: each a list of (field, value); comments skipped."""
    events, cur = [], []
    for line in body.split("\n"):
        line = line.removesuffix("\r")
        if not line:
            if cur:
                events.append(cur)
            cur = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        cur.append((field, value.removeprefix(" ")))
    if cur:
        events.append(cur)
    return events


def is_priming(e: list[tuple[str, str]]) -> bool:
    fields = [f for f, _ in e]
    return fields.count("id") == 1 and fields.count("retry") == 1 and fields.count("data") == 1 \
        and all(v == "" for f, v in e if f == "data")


def strict(version: str, what: str, body: str, content_type: str, tally: dict[str, int]) -> list[Any]:
    """The JSON-RPC messages of one answer as a strict client of `version` reads them."""
    if "text/event-stream" not in content_type:
        tally["json"] += 1
        return [json.loads(body)]
    tally["streams"] += 1
    primed = version >= PRIMING_SINCE and version != MODERN
    events = sse_events(body)
    out = []
    for n, e in enumerate(events):
        if primed and n == 0 and is_priming(e):
            tally["priming"] += 1
            continue
        for v in (v for f, v in e if f == "data"):
            try:
                out.append(json.loads(v))
            except ValueError:
                raise AssertionError(f"{what}: a data: line that is not JSON ({v!r}); a strict client of "
                                     f"{version} drops the server here\n{body[:600]}") from None
        fields = {f for f, _ in e}
        check("retry" not in fields or primed, f"{what}: a retry field, which {version} does not define")
        check("id" not in fields or version != MODERN, f"{what}: an event id in the 2026-07-28 framing")
    if primed:
        check(events and is_priming(events[0]), f"{what}: the stream does not open with the priming event")
    tally["messages"] += len(out)
    return out


def last(messages: list[Any], what: str) -> Any:
    check(messages and "result" in messages[-1], f"{what}: no result: {short(messages)}")
    return messages[-1]["result"]


def session_client(url: str, token: str, version: str, ws_file: str, marker: str | None) -> dict[str, int]:
    tally = {"streams": 0, "json": 0, "priming": 0, "messages": 0}
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
         "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "strict-sse", "version": "0"}}}
    status, rh, body = post(url, h, init)
    check(status == 200, f"initialize: HTTP {status} {short(body)}")
    res = last(strict(version, "initialize", body, rh.get("content-type", ""), tally), "initialize")
    check(res.get("protocolVersion") == version, f"initialize negotiated {res.get('protocolVersion')}")
    h["Mcp-Session-Id"] = rh.get("mcp-session-id", "")
    if version != "2025-03-26":  # the header exists from 2025-06-18 (§ Protocol Version Header)
        h["MCP-Protocol-Version"] = version
    status, _, _ = post(url, h, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    check(status == 202, f"notifications/initialized: HTTP {status}")

    # the standalone stream, read on a thread until the session's end closes it
    u = urllib.parse.urlsplit(url)
    got: dict[str, Any] = {}
    opened = threading.Event()

    def standalone() -> None:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=HTTP_SECS)
        try:
            c.request("GET", u.path, headers={k: v for k, v in h.items() if k != "Content-Type"}
                      | {"Accept": "text/event-stream"})
            r = c.getresponse()
            got["status"], got["type"] = r.status, r.getheader("content-type", "")
            opened.set()
            got["body"] = r.read().decode("utf-8", "replace")
        except OSError as e:
            got["error"] = str(e)
        finally:
            opened.set()
            c.close()
    t = threading.Thread(target=standalone, daemon=True)
    t.start()
    check(opened.wait(HTTP_SECS) and got.get("status") == 200, f"GET (standalone stream): {got}")

    status, rh, body = post(url, h, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    names = [x["name"] for x in last(strict(version, "tools/list", body, rh.get("content-type", ""), tally),
                                     "tools/list").get("tools", [])]
    check("read_file" in names, f"tools/list: {names}")
    status, rh, body = post(url, h, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": ws_file}, "_meta": {"progressToken": "p3"}}})
    call = last(strict(version, "tools/call", body, rh.get("content-type", ""), tally), "tools/call")
    check(not call.get("isError"), f"tools/call read_file: {short(call)}")
    check(marker is None or marker in json.dumps(call), f"tools/call read_file: no marker in {short(call)}")

    u2 = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u2.hostname, u2.port, timeout=HTTP_SECS)
    c.request("DELETE", u2.path, headers={k: v for k, v in h.items() if k != "Content-Type"})
    status = c.getresponse().status
    c.close()
    check(status == 200, f"DELETE: HTTP {status}")
    t.join(HTTP_SECS)
    check(not t.is_alive() and "body" in got, f"the standalone stream did not end with the session: {got}")
    strict(version, "the standalone GET stream", got["body"], got.get("type", ""), tally)
    return tally


def modern_client(url: str, token: str, ws_file: str, marker: str | None) -> dict[str, int]:
    tally = {"streams": 0, "json": 0, "priming": 0, "messages": 0}
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "strict-sse", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
         "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN}
    for n, (method, params, what) in enumerate([
        ("server/discover", {}, "server/discover"),
        ("tools/list", {}, "tools/list"),
        ("tools/call", {"name": "read_file", "arguments": {"path": ws_file}}, "tools/call"),
    ]):
        hh = dict(h, **{"Mcp-Method": method})
        if method == "tools/call":
            hh["Mcp-Name"] = "read_file"
        status, rh, body = post(url, hh, {"jsonrpc": "2.0", "id": n + 1, "method": method,
                                          "params": dict(params, _meta=dict(meta, progressToken=f"p{n}"))})
        check(status == 200, f"{what}: HTTP {status} {short(body)}")
        res = last(strict(MODERN, what, body, rh.get("content-type", ""), tally), what)
        if method == "tools/call":
            check(not res.get("isError") and (marker is None or marker in json.dumps(res)), f"{what}: {short(res)}")
    return tally


def cmd_strict_sse(up_file: Path, ws: Path | None) -> int:
    checks = Checks()
    up = load_up(up_file)
    marker = None
    ws_file = "strict-sse.txt"
    if ws is not None:
        marker = f"strict-sse-{secrets.token_hex(6)}"
        (ws / ws_file).write_text(marker + "\n")
    for version in [*SESSION_VERSIONS, MODERN]:
        tally: dict[str, int] = {}

        def go(version: str = version) -> None:
            if version == MODERN:
                tally.update(modern_client(up["mcp_url"], up["token"], ws_file, marker))
            else:
                tally.update(session_client(up["mcp_url"], up["token"], version, ws_file, marker))

        priming = {MODERN: "no event ids, no priming event", PRIMING_SINCE: "each stream opens with its priming event"}
        checks.run(f"hosts strict SSE client {version}: initialize{'' if version != MODERN else ' (none: discover)'}, "
                   f"tools/list, tools/call{', the standalone stream' if version != MODERN else ''}: every data line "
                   f"is JSON ({priming.get(version, 'no priming event, no retry field')})", go)
    return 1 if checks.failed else 0


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "matrix":
        return cmd_matrix(Path(argv[1]), Path(argv[2]), Path(argv[3]), Path(argv[4]))
    if len(argv) in (2, 3) and argv[0] == "strict-sse":
        return cmd_strict_sse(Path(argv[1]), Path(argv[2]) if len(argv) == 3 else None)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
