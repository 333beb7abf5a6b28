#!/usr/bin/env python3
"""Handshake-era sessions across a daemon restart and an automatic upgrade, for tests/interop/run.sh
(part `restart`): real clients keep the session they opened with `initialize` while the daemon
behind a relay stops and starts again, and while it restarts into a newer build of itself.

  restart.py WORK BIN      (env INTEROP_NODE, INTEROP_NODE_MODULES: the TypeScript SDK client)

Setup, in WORK/restart: `BIN relay serve --auth token --state-dir RELAY` on a free loopback port; a
bridge and an owner token made with the CLI (`relay bridge add`, `relay token create`, same state
dir); a copy of BIN in an install dir (`install/machine-mcp`, a hard link when it can be) that runs
the daemon, `connect --enroll CODE --profile agent`, on a one-file workspace with a state dir of
its own. Then, with every check printing `PASS name` / `FAIL name: why` as interop.py's do:

1. the Python `mcp` SDK (legacy mode: initialize, MCP-Session-Id) and the TypeScript SDK
   (ts-session.mjs, a long-lived process driven line by line) each open a session and read
   hello.txt;
2. the daemon is stopped with SIGTERM (exit 0 within STOP_SECS) and started again on the same
   state dir (without the spent code); once its log and the relay's metrics say ready, each
   session reads hello.txt again;
3. a newer build (a copy of BIN with its build stamp raised by one, the bytes after
   `machine-mcp build stamp:`) is renamed over the install copy; once the daemon (the same
   process) has logged its restart into it and is ready again, each session calls server_info
   and must see the new version (`VERSION+STAMP`).

Each client's HTTP wire is recorded (httpx2 response hooks; the transport's `fetch` in
ts-session.mjs): exactly one `initialize`, every later request carries the session id it
answered, and none of them is answered 404. No call is retried here: each is made once the
daemon is ready and must succeed the first time (the SDKs retry nothing on their own but a
dropped SSE stream). Logs: `logs/restart-*.log`.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Awaitable, Callable

from interop import CALL_TIMEOUT, Checks, check, res, short, structured

HELLO = "hello from the restart workspace\n"
READY = "connected to the relay and ready"
UPGRADING = "upgrade: restarting into the new binary"
STAMP = re.compile(rb"machine-mcp build stamp:([0-9]{24})")
STOP_SECS = 20  # a stopping daemon drains calls in flight for up to 10 s
READY_SECS = 30  # from a start (or a rename over the binary) to ready
READY_METRIC = 'machine_mcp_relay_daemon_sockets{state="ready"}'


# ---------------------------------------------------------------------------------------------
# processes

class Proc:
    """A child process whose stdout and stderr go to `log`."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def count(self, needle: str) -> int:
        return self.text().count(needle)

    def stop(self, secs: float) -> int | None:
        """SIGTERM, then SIGKILL after `secs`; the exit code (None: it had to be killed)."""
        if self.p.poll() is not None:
            return self.p.returncode
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(secs)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None


async def until(what: str, cond: Callable[[], bool], secs: float, why: Callable[[], str] = lambda: "") -> None:
    """Polls `cond` until it holds; fails with `what` after `secs`."""
    import anyio

    with anyio.move_on_after(secs):
        while not cond():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"{what} within {secs:g} s {why()}".rstrip())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(binary: str, *args: str) -> str:
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)
    check(p.returncode == 0, f"machine-mcp {' '.join(args)}: exit {p.returncode}: {short(p.stderr, 600)}")
    return p.stdout.strip()


def ready_sockets(base: str) -> int:
    """The relay's count of ready daemon sockets (-1: no answer)."""
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return -1
    for line in text.splitlines():
        if line.startswith(READY_METRIC):
            return int(float(line.split()[-1]))
    return 0


def newer_build(src: Path, dst: Path) -> int:
    """Writes beside `dst` a copy of `src` whose build stamp is one higher, then renames it over
    `dst` (as an upgrade installs a binary); returns the new stamp. The file is closed before the
    rename, so no descriptor open for writing makes the daemon's exec fail (ETXTBSY)."""
    with open(src, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        hits = list(STAMP.finditer(m))  # type: ignore[call-overload]
        check(len(hits) == 1, f"{len(hits)} build stamps in {src} (want 1)")
        at, stamp = hits[0].start(1), int(hits[0].group(1)) + 1
    tmp = dst.with_name(f".{dst.name}.next")
    shutil.copyfile(src, tmp)
    with open(tmp, "r+b") as f:
        f.seek(at)
        f.write(f"{stamp:024d}".encode())
    os.chmod(tmp, 0o755)
    os.rename(tmp, dst)
    return stamp


# ---------------------------------------------------------------------------------------------
# the clients' wires

def check_one_session(wire: list[dict[str, Any]]) -> None:
    """One initialize, answered with a session id that every later request carries; no 404."""
    lines = "\n".join(f"{w['http']} {w['rpc']} session={w['session']} -> {w['status']}" for w in wire[-30:])
    inits = [i for i, w in enumerate(wire) if w["rpc"] == "initialize"]
    check(len(inits) == 1, f"{len(inits)} initialize requests on the wire (want exactly 1)\n{lines}")
    sid = wire[inits[0]]["session_out"]
    check(sid, f"initialize answered without an MCP-Session-Id\n{lines}")
    later = wire[inits[0] + 1:]
    other = [w for w in later if w["session"] != sid]
    check(not other, f"{len(other)} request(s) without the session id {sid}\n{lines}")
    lost = [w for w in later if w["status"] == 404]
    check(not lost, f"{len(lost)} request(s) answered 404 (session lost)\n{lines}")


class TsSession:
    """ts-session.mjs: one TypeScript SDK session, asked for calls line by line."""

    def __init__(self, url: str, token: str, logs: Path) -> None:
        node, modules = os.environ["INTEROP_NODE"], os.environ["INTEROP_NODE_MODULES"]
        script = Path(__file__).with_name("ts-session.mjs")
        self.log = logs / "restart-ts.log"
        self.err = open(logs / "restart-ts.stderr", "w")
        self.p = subprocess.Popen([node, str(script), modules, url], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True,
                                  env={**os.environ, "INTEROP_TOKEN": token})

    async def read(self, secs: float = CALL_TIMEOUT * 2) -> dict[str, Any]:
        import anyio

        assert self.p.stdout
        with anyio.fail_after(secs):
            line = await anyio.to_thread.run_sync(self.p.stdout.readline, abandon_on_cancel=True)
        with open(self.log, "a") as f:
            f.write(f"< {line.rstrip()[:4000]}\n")
        check(line, f"ts-session.mjs ended (exit {self.p.poll()})")
        return json.loads(line)

    async def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.p.stdin
        with open(self.log, "a") as f:
            f.write(f"> {json.dumps(msg)}\n")
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        return await self.read()

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        a = await self.ask({"call": name, "arguments": args})
        check("result" in a, f"the SDK threw: {a.get('error')} (code {a.get('code')})")
        return structured(a["result"])

    async def wire(self) -> list[dict[str, Any]]:
        return (await self.ask({"wire": True}))["wire"]

    def close(self) -> None:
        """Asks the script to end the session (DELETE) and exit; kills it after 10 s."""
        assert self.p.stdin and self.p.stdout
        try:
            if self.p.poll() is None:
                self.p.stdin.write(json.dumps({"quit": True}) + "\n")
            self.p.stdin.close()
            self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()
        self.err.close()


# ---------------------------------------------------------------------------------------------
# the run

def cmd_restart(work: Path, binary: str) -> int:
    import anyio

    return anyio.run(restart, work, binary)


async def restart(work: Path, binary: str) -> int:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    root = work / "restart"
    logs = work / "logs"
    ws, install = root / "ws", root / "install"
    for d in (ws, install, logs):
        d.mkdir(parents=True, exist_ok=True)
    (ws / "hello.txt").write_text(HELLO)
    exe = install / "machine-mcp"
    try:
        os.link(binary, exe)  # a rename over it later replaces the link, never BIN
    except OSError:
        shutil.copy2(binary, exe)
    relay_state, daemon_state = root / "relay-state", root / "daemon-state"
    checks = Checks()
    procs: dict[str, Proc] = {}
    daemon_logs: list[Path] = []
    logf = lambda: [*(p.log for p in procs.values()), *daemon_logs[:-1]]  # noqa: E731

    async def step(name: str, fn: Callable[[], Awaitable[Any]], more: Callable[[], list[Path]] = lambda: []) -> bool:
        try:
            await fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported, none is fatal
            checks.report(name, e, lambda: [*more(), *logf()])
            return False
        checks.report(name, None)
        return True

    base = ""
    token = ""

    async def start_relay() -> None:
        nonlocal base
        for _ in range(3):  # a port taken meanwhile is retried
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            procs["relay"] = relay = Proc([binary, "relay", "serve", "--listen", f"127.0.0.1:{port}", "--auth", "token",
                                           "--state-dir", str(relay_state), "--log-level", "debug"],
                                          logs / "restart-relay.log")
            await until("the relay answered /healthz", lambda: relay.p.poll() is not None or healthy(base),
                        READY_SECS)
            if relay.p.poll() is None:
                return
            if "address already in use" not in relay.text().lower():
                break
        raise AssertionError(f"relay serve exited {procs['relay'].p.returncode}")

    def start_daemon(*extra: str) -> Proc:
        n = len(daemon_logs) + 1
        daemon_logs.append(logs / f"restart-daemon-{n}.log")
        procs["daemon"] = Proc([str(exe), "connect", "--relay", base, "--workspace", str(ws), "--state-dir",
                                str(daemon_state), "--profile", "agent", "--heartbeat-ms", "1000",
                                "--log-level", "debug", *extra], daemon_logs[-1])
        return procs["daemon"]

    async def ready(d: Proc, n: int = 1) -> None:
        await until(f"the daemon logged {READY!r} ({n}x)", lambda: d.p.poll() is not None or d.count(READY) >= n,
                    READY_SECS)
        check(d.p.poll() is None, f"the daemon exited {d.p.returncode}")
        await until("the relay counts one ready daemon socket", lambda: ready_sockets(base) == 1, READY_SECS,
                    lambda: f"(it counts {ready_sockets(base)})")

    async def setup() -> None:
        nonlocal token
        await start_relay()
        code = cli(binary, "relay", "bridge", "add", "b1", "--state-dir", str(relay_state))
        token = cli(binary, "relay", "token", "create", "--bridge", "b1", "--role", "owner",
                    "--state-dir", str(relay_state))
        await ready(start_daemon("--enroll", code))

    name = "restart: relay serve --auth token, a bridge and a token from the CLI, connect --enroll ready"
    if not await step(name, setup):
        for p in procs.values():
            p.stop(5)
        return 1
    url = f"{base}/b/b1/mcp"

    py_wire: list[dict[str, Any]] = []
    py_log = logs / "restart-python.log"

    async def record(response: Any) -> None:
        req = response.request
        rpc = "-"
        if req.content:
            try:
                body = json.loads(req.content)
                rpc = body.get("method", "(response)") if isinstance(body, dict) else "(batch)"
            except ValueError:
                rpc = "(unparsed)"
        w = {"http": req.method, "rpc": rpc, "session": req.headers.get("mcp-session-id"),
             "status": response.status_code, "session_out": response.headers.get("mcp-session-id")}
        py_wire.append(w)
        with open(py_log, "a") as f:
            f.write(json.dumps(w) + "\n")

    py: Any = None
    ts: TsSession | None = None
    versions: dict[str, str] = {}
    ts_logs = lambda: [logs / "restart-ts.log", logs / "restart-ts.stderr"]  # noqa: E731
    py_logs = lambda: [py_log]  # noqa: E731

    async def py_read(label: str) -> None:
        check(py is not None, "no session (see the first python-sdk check)")
        with anyio.fail_after(CALL_TIMEOUT):
            sc = structured(res(await py.call_tool("read_file", {"path": "hello.txt"})))
        check(sc.get("content") == HELLO, f"{label}: read_file gave {short(sc)}")
        check_one_session(py_wire)

    async def ts_read(label: str) -> None:
        check(ts is not None, "no session (see the first ts-sdk check)")
        sc = await ts.call("read_file", {"path": "hello.txt"})
        check(sc.get("content") == HELLO, f"{label}: read_file gave {short(sc)}")
        check_one_session(await ts.wire())

    async with AsyncExitStack() as stack:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(CALL_TIMEOUT, read=300),
                                  event_hooks={"response": [record]})
        await stack.enter_async_context(http)

        async def py_open() -> None:
            nonlocal py
            # no cancel scope around it: the client's task group outlives this step
            c = await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http), mode="legacy",
                       read_timeout_seconds=CALL_TIMEOUT))
            check(c.protocol_version == "2025-11-25", f"negotiated {c.protocol_version!r}, want 2025-11-25")
            py = c
            await py_read("before the restart")
            with anyio.fail_after(CALL_TIMEOUT):
                versions["python"] = structured(res(await c.call_tool("server_info", {})))["version"]

        async def ts_open() -> None:
            nonlocal ts
            s = TsSession(url, token, logs)
            stack.callback(s.close)
            hello = (await s.read())["connected"]
            check(hello["protocol_version"] == "2025-11-25", f"negotiated {hello['protocol_version']!r}")
            check(hello["session_id"], "no MCP-Session-Id")
            ts = s
            await ts_read("before the restart")
            versions["ts"] = (await s.call("server_info", {}))["version"]

        await step("python-sdk (restart): a legacy session (initialize, session id) reads a file", py_open, py_logs)
        await step("ts-sdk (restart): a legacy session (initialize, session id) reads a file", ts_open, ts_logs)

        # 2. a graceful stop and a new process on the same state dir
        async def restart_daemon() -> None:
            old = procs["daemon"]
            rc = await anyio.to_thread.run_sync(old.stop, STOP_SECS)
            check(rc == 0, f"the daemon on SIGTERM: {'still running after %ds' % STOP_SECS if rc is None else f'exit {rc}'}")
            await ready(start_daemon())

        await step("restart: the daemon stops on SIGTERM (exit 0) and is ready again on its state dir", restart_daemon)
        await step("python-sdk (restart): the same session reads the file after the daemon restart "
                   "(one initialize, same session id)", lambda: py_read("after the restart"), py_logs)
        await step("ts-sdk (restart): the same session reads the file after the daemon restart "
                   "(one initialize, same session id)", lambda: ts_read("after the restart"), ts_logs)

        # 3. an automatic upgrade: a newer build renamed over the binary the daemon runs from
        want: dict[str, str] = {}

        async def upgrade() -> None:
            d = procs["daemon"]
            pid = d.p.pid
            stamp = await anyio.to_thread.run_sync(newer_build, Path(binary), exe)
            for client, v in versions.items():
                want[client] = f"{v.split('+')[0]}+{stamp}"
            await until(f"the daemon logged {UPGRADING!r}", lambda: d.p.poll() is not None or UPGRADING in d.text(),
                        READY_SECS * 2)
            await ready(d, 2)
            check(d.p.pid == pid and d.p.poll() is None, "the daemon process did not stay the same")

        async def py_version() -> None:
            check(py is not None and "python" in want, "no session, or no version from before")
            with anyio.fail_after(CALL_TIMEOUT):
                v = structured(res(await py.call_tool("server_info", {})))["version"]
            check(v == want["python"], f"server_info version {v!r}, want {want['python']!r}")
            check_one_session(py_wire)

        async def ts_version() -> None:
            check(ts is not None and "ts" in want, "no session, or no version from before")
            v = (await ts.call("server_info", {}))["version"]
            check(v == want["ts"], f"server_info version {v!r}, want {want['ts']!r}")
            check_one_session(await ts.wire())

        await step("upgrade: a newer build renamed over the daemon's binary; it restarts into it and is ready",
                   upgrade)
        await step("python-sdk (upgrade): the same session's server_info shows the new version "
                   "(one initialize, same session id)", py_version, py_logs)
        await step("ts-sdk (upgrade): the same session's server_info shows the new version "
                   "(one initialize, same session id)", ts_version, ts_logs)
    for p in (procs.get("daemon"), procs.get("relay")):
        if p is not None and p.stop(STOP_SECS) is None:
            with open(p.log, "a") as f:
                f.write(f"(still running {STOP_SECS} s after SIGTERM: killed)\n")
    return 1 if checks.failed else 0


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(cmd_restart(Path(sys.argv[1]), sys.argv[2]))
