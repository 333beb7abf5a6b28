"""Benchmark section 6: the relay (MCP Streamable HTTP carried to a stdio server) against direct
stdio and two stdio→HTTP fronts, and the relay's memory with 100 connected daemons.

6a. One load client for every target: bench/loadgen.rs (std-only Rust, `rustc -O`). Each run of
    it opens one MCP session, makes 100 unmeasured warm-up calls, then phase 1: N1 sequential
    `tools/call` (concurrency 1, latency p50/p99) and phase 2: N10 calls from 10 closed-loop
    workers (throughput; over HTTP each worker has its own keep-alive connection on the same
    session). The tool is `test_simple_text` of the conformance fixture
    (target/release/conformance-fixture, an rmcp stdio server) — the same stdio server behind
    every front:
      - direct: loadgen spawns the fixture and speaks stdio to it;
      - relay: `machine-mcp up --auth token --servers FILE --json` (relay + daemon in one
        process, loopback), URL /b/local/s/fixture/mcp, bearer token; one fixture per session;
      - supergateway 4.0.0 `--stdio FIXTURE --outputTransport streamableHttp --stateful`;
      - mcp-proxy 6.7.19 `--server stream -- FIXTURE`.
    Extra rows: the built-in runtime through the relay (/b/local/mcp, `list_processes`, a
    143-byte answer) with `machine-mcp stdio` + `list_processes` direct as its reference.
    Targets rotate within each round (direct, relay, built-in direct, built-in relay,
    supergateway, mcp-proxy) and rounds repeat, so a burst of load hits all of them.
6c. Both MCP eras through the relay (section `relay-eras`): one `machine-mcp up` (token auth,
    the fixture carried), and loadgen against it in the legacy era (`initialize` +
    `Mcp-Session-Id`, protocol 2025-11-25) and in the 2026-07-28 era (`--era 2026`: no session;
    `server/discover` once, then every `tools/call` with `_meta` protocolVersion/clientInfo/
    clientCapabilities and the `Mcp-Method`/`Mcp-Name` headers), for the carried fixture
    (`test_simple_text`) and the built-in runtime (`list_processes`); the four targets rotate within
    each round. Besides the pooled p50/p99 and the median calls/s, the report gives the ratio
    2026/legacy per round (the two eras of one tool run back to back) and its median, which drifts
    less with the machine's load. A 2026 target that fails (a relay without the 2026 path answers its
    `server/discover` with HTTP 400) is reported as failed with loadgen's message, never skipped.
6b. Relay memory: `machine-mcp relay serve` (token auth) alone, then with N bridges (`relay
    bridge add`; N = `--relay-daemons`, 100 by default) and N `machine-mcp connect --enroll CODE`
    processes, each with its own state dir; VmRSS/VmHWM of the relay process once all N daemon
    sockets are `ready` (from /metrics, within 120 s or 0.3 s per daemon, whichever is longer)
    and again after a settle time; the memory per connected daemon is (settled - empty) / N.
"""

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

from common import cell, fmt_ms, kib_field, log, ms, pct, proc_status, status, stop_process, tree_cpu_seconds

WARMUP = 100


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=30, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode} before {url} answered")
        try:
            # Any HTTP answer (even 4xx for a GET without a session) means it listens.
            urllib.request.urlopen(url, timeout=2).read()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


class Front:
    """A server process measured over HTTP (relay `up`, supergateway, mcp-proxy)."""

    def __init__(self, name, argv, url=None, env=None, json_stdout=False, log_path=None):
        self.name = name
        self.log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.p = subprocess.Popen(
            argv, stdout=subprocess.PIPE if json_stdout else self.log, stderr=self.log, env=env,
            start_new_session=True,
        )
        self.headers = []
        if json_stdout:
            line = self.p.stdout.readline()  # `up --json` prints once the daemon is ready
            if not line:
                raise RuntimeError(f"{name}: no JSON on stdout (exit {self.p.poll()})")
            self.info = json.loads(line)
            self.headers = [f"Authorization: Bearer {self.info['token']}"]
        else:
            self.info = None
            wait_http(url, proc=self.p)

    def close(self):
        # The front's children (the fixture per session) are in its process group.
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        try:
            os.killpg(self.p.pid, signal.SIGKILL)  # leftovers of the group, if any
        except (ProcessLookupError, PermissionError):
            pass
        if self.log is not subprocess.DEVNULL:
            self.log.close()


def run_loadgen(loadgen, target_args, tool, n1, n10, server_pid=None, args="{}", era="legacy"):
    """One loadgen run; returns its JSON plus CPU figures. server_pid: the HTTP front whose
    process tree's CPU is measured around the run; for stdio targets the server is loadgen's
    child, and its CPU is loadgen's wait4 total minus loadgen's own."""
    argv = [loadgen, "--tool", tool, "--args", args, "--warmup", str(WARMUP), "--era", era,
            "--phase", f"1:{n1}", "--phase", f"10:{n10}"] + target_args
    cpu0 = tree_cpu_seconds(server_pid) if server_pid else 0.0
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"loadgen {' '.join(target_args)[:200]}: exit {p.returncode}: {err.decode()[-500:]}")
    d = json.loads(out)
    calls = WARMUP + 1 + n1 + n10
    if server_pid:
        d["server_cpu_s"] = tree_cpu_seconds(server_pid) - cpu0
    d["calls_total"] = calls
    if "This is a simple text response" not in d["first_result"] and tool == "test_simple_text":
        raise RuntimeError(f"unexpected result: {d['first_result'][:300]}")
    if d["first_result"] and '"isError":true' in d["first_result"]:
        raise RuntimeError(f"tool error: {d['first_result'][:300]}")
    for ph in d["phases"]:
        if ph["errors"]:
            raise RuntimeError(f"loadgen {' '.join(target_args)[:200]}: {ph['errors']} errors at c={ph['concurrency']}")
    return d


def run_loadgen_stdio(loadgen, cmd, tool, n1, n10):
    """stdio: the server is loadgen's child; wait4 on loadgen gives loadgen + server CPU."""
    argv = [loadgen, "--tool", tool, "--warmup", str(WARMUP), "--phase", f"1:{n1}", "--phase", f"10:{n10}",
            "--stdio", "--"] + cmd
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, st, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(st)
    if p.returncode != 0:
        raise RuntimeError(f"loadgen stdio {cmd[0]}: exit {p.returncode}: {err.decode()[-500:]}")
    d = json.loads(out)
    # ru covers loadgen and its waited-for child (the server).
    d["server_cpu_s"] = max(0.0, ru.ru_utime + ru.ru_stime - d["total_cpu_s"])
    d["calls_total"] = WARMUP + 1 + n1 + n10
    for ph in d["phases"]:
        if ph["errors"]:
            raise RuntimeError(f"loadgen stdio {cmd[0]}: {ph['errors']} errors")
    return d


def bench_relay_load(binary, fixture, node, modules, loadgen, rounds, n1, n10, workdir):
    ws = os.path.join(workdir, "ws")
    os.makedirs(ws, exist_ok=True)
    servers = os.path.join(workdir, "servers.json")
    with open(servers, "w") as f:
        json.dump({"mcpServers": {"fixture": {"command": fixture, "args": []}}}, f)
    fronts = {}
    try:
        def up(name, state):
            port = free_port()
            env = dict(os.environ)
            return Front(
                name,
                [binary, "up", "--auth", "token", "--servers", servers, "--json", "--workspace", ws,
                 "--state-dir", os.path.join(workdir, state), "--listen", f"127.0.0.1:{port}",
                 "--log-level", "warn"],
                env=env, json_stdout=True, log_path=os.path.join(workdir, f"{name}.log"),
            )

        fronts["relay"] = up("relay", "state-up")
        if node and modules:
            for name, script, extra in (
                ("supergateway", "supergateway/dist/index.js",
                 lambda port: ["--stdio", fixture, "--outputTransport", "streamableHttp", "--stateful",
                               "--port", str(port), "--logLevel", "none"]),
                ("mcp-proxy", "mcp-proxy/dist/bin/mcp-proxy.mjs",
                 lambda port: ["--port", str(port), "--host", "127.0.0.1", "--server", "stream", "--", fixture]),
            ):
                port = free_port()
                f = Front(name, [node, os.path.join(modules, script)] + extra(port),
                          url=f"http://127.0.0.1:{port}/healthz-probe",
                          log_path=os.path.join(workdir, f"{name}.log"))
                f.url = f"http://127.0.0.1:{port}/mcp"
                fronts[name] = f

        targets = [("direct", None), ("relay", "relay"), ("builtin-direct", None), ("builtin-relay", "relay")]
        targets += [(n, n) for n in ("supergateway", "mcp-proxy") if n in fronts]
        res = {name: [] for name, _ in targets}
        for r in range(rounds):
            for name, front in targets:
                if name == "direct":
                    d = run_loadgen_stdio(loadgen, [fixture], "test_simple_text", n1, n10)
                elif name == "builtin-direct":
                    d = run_loadgen_stdio(loadgen, [binary, "stdio", "--workspace", ws], "list_processes", n1, n10)
                else:
                    f = fronts[front]
                    if name == "relay":
                        url, tool = f.info["servers"]["fixture"], "test_simple_text"
                    elif name == "builtin-relay":
                        url, tool = f.info["mcp_url"], "list_processes"
                    else:
                        url, tool = f.url, "test_simple_text"
                    hdr = []
                    for h in f.headers:
                        hdr += ["--header", h]
                    d = run_loadgen(loadgen, ["--http", url] + hdr, tool, n1, n10, server_pid=f.p.pid)
                res[name].append(d)
                c1, c10 = d["phases"]
                log(f"  {name} round {r + 1}: c=1 p50 {ms(pct(c1['latencies_ns'], 50)):.3f} ms, "
                    f"c=10 {c10['requests'] / c10['elapsed_s']:.0f} calls/s")
        return res
    finally:
        for f in fronts.values():
            f.close()


# ---------------------------------------------------------------------------------------------
# 6c. both eras through the relay

ERA_TARGETS = (
    # name, era, URL key in up's JSON, tool
    ("fixture-legacy", "legacy", "fixture", "test_simple_text"),
    ("fixture-2026", "2026", "fixture", "test_simple_text"),
    ("builtin-legacy", "legacy", "mcp_url", "list_processes"),
    ("builtin-2026", "2026", "mcp_url", "list_processes"),
)


def bench_relay_eras(binary, fixture, loadgen, rounds, n1, n10, workdir):
    """Returns {target: [loadgen JSON per round]} and {target: error} for targets that failed (the
    target is not run again in later rounds)."""
    ws = os.path.join(workdir, "ws")
    os.makedirs(ws, exist_ok=True)
    servers = os.path.join(workdir, "servers.json")
    with open(servers, "w") as f:
        json.dump({"mcpServers": {"fixture": {"command": fixture, "args": []}}}, f)
    port = free_port()
    front = Front(
        "relay",
        [binary, "up", "--auth", "token", "--servers", servers, "--json", "--workspace", ws,
         "--state-dir", os.path.join(workdir, "state-up"), "--listen", f"127.0.0.1:{port}",
         "--log-level", "warn"],
        env=dict(os.environ), json_stdout=True, log_path=os.path.join(workdir, "relay-eras.log"),
    )
    res = {name: [] for name, *_ in ERA_TARGETS}
    errors = {}
    try:
        hdr = []
        for h in front.headers:
            hdr += ["--header", h]
        for r in range(rounds):
            for name, era, key, tool in ERA_TARGETS:
                if name in errors:
                    continue
                url = front.info["mcp_url"] if key == "mcp_url" else front.info["servers"][key]
                try:
                    d = run_loadgen(loadgen, ["--http", url] + hdr, tool, n1, n10, server_pid=front.p.pid, era=era)
                except RuntimeError as e:
                    errors[name] = str(e)
                    log(f"  {name} round {r + 1}: FAILED: {str(e)[-300:]}")
                    continue
                res[name].append(d)
                c1, c10 = d["phases"]
                log(f"  {name} round {r + 1}: c=1 p50 {ms(pct(c1['latencies_ns'], 50)):.3f} ms, "
                    f"c=10 {c10['requests'] / c10['elapsed_s']:.0f} calls/s")
    finally:
        front.close()
    return res, errors


ERA_LABELS = {
    "fixture-legacy": "relay → fixture `test_simple_text`, legacy era (`initialize` 2025-11-25 + `Mcp-Session-Id`)",
    "fixture-2026": "relay → fixture `test_simple_text`, 2026-07-28 (no session, `_meta` + `Mcp-Method`/`Mcp-Name`)",
    "builtin-legacy": "relay → built-in `list_processes` (`/b/local/mcp`), legacy era",
    "builtin-2026": "relay → built-in `list_processes` (`/b/local/mcp`), 2026-07-28",
}


def _err(text):
    """A failure message for one table cell: one line, its last 300 characters."""
    return cell(" ".join(text.split())[-300:])


def report_eras(eras, n1, n10):
    runs, errors = eras
    rows, det = [], []
    a = {k: (_agg(v, 0), _agg(v, 1)) for k, v in runs.items() if v}
    rounds = max((len(v) for v in runs.values()), default=0)
    for what, new, old in (("fixture `test_simple_text`", "fixture-2026", "fixture-legacy"),
                           ("built-in `list_processes`", "builtin-2026", "builtin-legacy")):
        if old not in a:
            rows.append(f"| 6 | relay → {what}, legacy era | ❌ failed: {_err(errors.get(old, 'no run'))} | — | — | — | ❌ failed |")
            continue
        o1, o10 = a[old]
        ref = (f"legacy era, same `up`, same run: {fmt_ms(ms(pct(o1['lat'], 50)))} / {fmt_ms(ms(pct(o1['lat'], 99)))} ms; "
               f"{o10['tput']:.0f} calls/s")
        if new not in a:
            rows.append(
                f"| 6 | 2026-07-28 `tools/call` through the relay → {what}, c=1 p50 / p99; c=10 throughput "
                f"| ❌ failed: {_err(errors.get(new, 'no run'))} | {ref} | — | — | ❌ failed |")
            continue
        n1_, n10_ = a[new]
        p50n, p50o = ms(pct(n1_["lat"], 50)), ms(pct(o1["lat"], 50))
        pr = _paired(runs[new], runs[old])
        paired = (f" (paired per round, median: {pr['p50']:.2f}x p50; {pr['tput']:.2f}x calls/s)"
                  if pr else "")
        rows.append(
            f"| 6 | 2026-07-28 `tools/call` through the relay → {what}, c=1 p50 / p99 ({rounds} × {n1} calls); "
            f"c=10 throughput (median of {rounds} × {n10}) "
            f"| {fmt_ms(p50n)} / {fmt_ms(ms(pct(n1_['lat'], 99)))} ms; {n10_['tput']:.0f} calls/s | {ref} "
            f"| {p50n / p50o:.2f}x p50; {n10_['tput'] / o10['tput']:.2f}x calls/s{paired} | — | (reported) |"
        )
    det.append("## Relay, both eras, details")
    det.append("")
    det.append(
        f"One `machine-mcp up --auth token --servers FILE` (the fixture carried as `fixture`); the same load client "
        f"(`bench/loadgen.rs`) per target and round: legacy = `initialize` (2025-11-25) + "
        f"`notifications/initialized`, then every call with the `Mcp-Session-Id`; 2026-07-28 = `--era 2026`: one "
        f"`server/discover` (its `supportedVersions` must name 2026-07-28), then every `tools/call` with "
        f"`MCP-Protocol-Version: 2026-07-28`, `Mcp-Method: tools/call`, `Mcp-Name: TOOL` and `params._meta` "
        f"(`io.modelcontextprotocol/protocolVersion`, `clientInfo`, `clientCapabilities` `{{}}`), no session. "
        f"{WARMUP} warm-up calls, {n1} sequential calls (c=1), {n10} calls from 10 closed-loop workers with a "
        f"keep-alive connection each (c=10); the four targets rotate within each of the {rounds} rounds. Server CPU: "
        f"the `up` process tree (relay, daemon, fixture processes) per call, warm-up included."
    )
    det.append("")
    det.append("| target | c=1 p50 | c=1 p99 | c=10 p50 | c=10 p99 | c=10 calls/s (rounds) | client CPU µs/call, c=1 / c=10 | server CPU µs/call |")
    det.append("|---|---|---|---|---|---|---|---|")
    for k, *_ in ERA_TARGETS:
        if k not in a:
            det.append(f"| {ERA_LABELS[k]} | ❌ failed: {_err(errors.get(k, 'no run'))} | | | | | | |")
            continue
        p1, p10 = a[k]
        det.append(
            f"| {ERA_LABELS[k]} | {fmt_ms(ms(pct(p1['lat'], 50)))} ms | {fmt_ms(ms(pct(p1['lat'], 99)))} ms "
            f"| {fmt_ms(ms(pct(p10['lat'], 50)))} ms | {fmt_ms(ms(pct(p10['lat'], 99)))} ms "
            f"| {p10['tput']:.0f} ({', '.join(f'{x:.0f}' for x in p10['tputs'])}) "
            f"| {p1['client_us']:.0f} / {p10['client_us']:.0f} | {p1['server_us']:.0f} |"
        )
    det.append("")
    for what, new, old in (("fixture", "fixture-2026", "fixture-legacy"), ("built-in", "builtin-2026", "builtin-legacy")):
        pr = _paired(runs.get(new, []), runs.get(old, []))
        if not pr:
            continue
        det.append(
            f"Paired ratios 2026-07-28 / legacy, {what}, per round (the two eras run back to back): c=1 p50 "
            f"{', '.join(f'{x:.2f}' for x in pr['p50s'])} (median {pr['p50']:.2f}x); c=10 calls/s "
            f"{', '.join(f'{x:.2f}' for x in pr['tputs'])} (median {pr['tput']:.2f}x)."
        )
        det.append("")
    return rows, det


def _paired(new_runs, old_runs):
    """Per-round ratios new/old of c=1 p50 and c=10 calls/s, and their medians; None without a
    complete pair. The two targets of a pair run next to each other in every round, so a ratio
    within a round is less exposed to the machine's load drifting between rounds."""
    if not new_runs or len(new_runs) != len(old_runs):
        return None
    p50s, tputs = [], []
    for n, o in zip(new_runs, old_runs):
        (n1, n10), (o1, o10) = n["phases"], o["phases"]
        p50s.append(pct(n1["latencies_ns"], 50) / pct(o1["latencies_ns"], 50))
        tputs.append((n10["requests"] / n10["elapsed_s"]) / (o10["requests"] / o10["elapsed_s"]))
    return {"p50s": p50s, "tputs": tputs, "p50": statistics.median(p50s), "tput": statistics.median(tputs)}


# ---------------------------------------------------------------------------------------------
# 6b. memory with N daemons (100 by default)


def relay_rss(pid):
    st = proc_status(pid)
    return {"rss": kib_field(st, "VmRSS"), "hwm": kib_field(st, "VmHWM"), "threads": int(st["Threads"])}


def bench_relay_memory(binary, n_daemons, settle, workdir, relay_env=None):
    port = free_port()
    state = os.path.join(workdir, "relay-state")
    url = f"http://127.0.0.1:{port}"
    relay = subprocess.Popen(
        [binary, "relay", "serve", "--listen", f"127.0.0.1:{port}", "--state-dir", state, "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "relay-serve.log"), "wb"),
        env=dict(os.environ, **(relay_env or {})),
    )
    daemons = []
    out = {"n": n_daemons}
    try:
        wait_http(url + "/healthz", proc=relay)
        time.sleep(1)
        out["empty"] = relay_rss(relay.pid)
        codes = []
        t0 = time.monotonic()
        for i in range(n_daemons):
            r = subprocess.run([binary, "relay", "bridge", "add", f"b{i:03d}", "--state-dir", state, "--log-level", "warn"],
                               capture_output=True, text=True, check=True)
            m = re.search(r"mbe_[A-Za-z0-9_\-]+", r.stdout + r.stderr)
            if not m:
                raise RuntimeError(f"bridge add: no code in {r.stdout!r} {r.stderr!r}")
            codes.append(m.group(0))
        out["enroll_s"] = time.monotonic() - t0
        ws = os.path.join(workdir, "ws")
        os.makedirs(ws, exist_ok=True)
        t0 = time.monotonic()

        def start(i):
            d = os.path.join(workdir, f"daemon-{i:03d}")
            os.makedirs(d, exist_ok=True)
            return subprocess.Popen(
                [binary, "connect", "--relay", url, "--enroll", codes[i], "--workspace", ws, "--state-dir", d,
                 "--log-level", "warn"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "stderr.log"), "ab"),
            )

        daemons.extend(start(i) for i in range(n_daemons))
        # Before commit 5b57c59 concurrent enrollments could fail with "database is locked" (see
        # BENCHMARKS.md); a daemon that exits is started again with its (still valid) code, and
        # the restarts are reported, so a regression shows in the results.
        retries = []
        wait_s = max(120, 0.3 * n_daemons)
        deadline = time.monotonic() + wait_s
        ready = 0
        while time.monotonic() < deadline:
            ready = int(metrics(port).get('machine_mcp_relay_daemon_sockets{state="ready"}', 0))
            if ready >= n_daemons:
                break
            for i, p in enumerate(daemons):
                if p.poll() is not None:
                    with open(os.path.join(workdir, f"daemon-{i:03d}", "stderr.log"), "rb") as f:
                        retries.append(f.read().decode(errors="replace").strip().splitlines()[-1:])
                    if len(retries) > 5 * n_daemons:
                        raise RuntimeError(f"daemons keep exiting: {retries[-1]}")
                    daemons[i] = start(i)
            time.sleep(0.2)
        out["restarts"] = len(retries)
        out["restart_reasons"] = sorted({r[0] if r else "?" for r in retries})
        out["ready"] = ready
        out["connect_s"] = time.monotonic() - t0
        if ready < n_daemons:
            raise RuntimeError(f"only {ready} of {n_daemons} daemons ready after {wait_s:.0f} s")
        out["connected"] = relay_rss(relay.pid)
        time.sleep(settle)
        out["settled"] = relay_rss(relay.pid)
        out["settle_s"] = settle
        out["ready_after_settle"] = int(metrics(port).get('machine_mcp_relay_daemon_sockets{state="ready"}', 0))
        rss = sorted(kib_field(proc_status(p.pid), "VmRSS") for p in daemons)
        out["daemon_rss_median"] = rss[len(rss) // 2]
        out["relay_cpu_s"] = tree_cpu_seconds(relay.pid)
    finally:
        for p in daemons:
            if p.poll() is None:
                p.terminate()
        for p in daemons:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        stop_process(relay)
    return out


# ---------------------------------------------------------------------------------------------
# report


def _agg(runs, phase):
    lat = [x for d in runs for x in d["phases"][phase]["latencies_ns"]]
    tput = [d["phases"][phase]["requests"] / d["phases"][phase]["elapsed_s"] for d in runs]
    ccpu = sum(d["phases"][phase]["client_cpu_s"] for d in runs)
    nreq = sum(d["phases"][phase]["requests"] for d in runs)
    scpu = sum(d.get("server_cpu_s", 0.0) for d in runs)
    scalls = sum(d["calls_total"] for d in runs)
    return {"lat": lat, "tput": statistics.median(tput), "tputs": tput, "client_us": ccpu / nreq * 1e6,
            "server_us": scpu / scalls * 1e6 if scalls else 0.0}


LABELS = {
    "direct": "fixture direct over stdio",
    "relay": "our relay (`machine-mcp up`, token) → daemon → fixture",
    "builtin-direct": "built-in `list_processes`, `machine-mcp stdio` direct",
    "builtin-relay": "built-in `list_processes` through our relay (`/b/local/mcp`)",
    "supergateway": "supergateway 4.0.0 `--stateful` → fixture",
    "mcp-proxy": "mcp-proxy 6.7.19 `--server stream` → fixture",
}


def report(load, mem, n1, n10):
    rows, det = [], []
    if load:
        a = {k: (_agg(v, 0), _agg(v, 1)) for k, v in load.items()}
        d50 = ms(pct(a["direct"][0]["lat"], 50))
        r50 = ms(pct(a["relay"][0]["lat"], 50))
        r99, d99 = ms(pct(a["relay"][0]["lat"], 99)), ms(pct(a["direct"][0]["lat"], 99))
        rounds = len(load["direct"])
        rows.append(
            f"| 6 | relay → fixture `test_simple_text`, c=1 p50 / p99 ({rounds} × {n1} calls) "
            f"| {fmt_ms(r50)} / {fmt_ms(r99)} ms | direct stdio: {fmt_ms(d50)} / {fmt_ms(d99)} ms "
            f"| **+{fmt_ms(r50 - d50)} ms** p50 | ≤ +1 ms p50 | {status(r50 - d50 <= 1.0)} |"
        )
        if "supergateway" in a:
            rt, st = a["relay"][1]["tput"], a["supergateway"][1]["tput"]
            ref = f"supergateway: {st:.0f} calls/s"
            if "mcp-proxy" in a:
                ref += f"; mcp-proxy: {a['mcp-proxy'][1]['tput']:.0f} calls/s"
            ref += f"; direct stdio: {a['direct'][1]['tput']:.0f} calls/s"
            rows.append(
                f"| 6 | relay → fixture throughput at c=10, median of {rounds} × {n10} calls | {rt:.0f} calls/s "
                f"| {ref} | **{rt / st:.2f}x** supergateway | ≥ 4x supergateway | {status(rt / st >= 4)} |"
            )
        b50, bd50 = ms(pct(a["builtin-relay"][0]["lat"], 50)), ms(pct(a["builtin-direct"][0]["lat"], 50))
        rows.append(
            f"| 6 | built-in `list_processes` through the relay, c=1 p50; c=10 throughput "
            f"| {fmt_ms(b50)} ms; {a['builtin-relay'][1]['tput']:.0f} calls/s "
            f"| `machine-mcp stdio` direct: {fmt_ms(bd50)} ms; {a['builtin-direct'][1]['tput']:.0f} calls/s "
            f"| +{fmt_ms(b50 - bd50)} ms | — | (reported) |"
        )
        det.append("## Relay, details")
        det.append("")
        det.append(
            f"One load client for every row: `bench/loadgen.rs` (std-only Rust, built with `rustc -O`). Per "
            f"target and round: one MCP session, {WARMUP} warm-up calls, then {n1} sequential calls (c=1) and "
            f"{n10} calls from 10 closed-loop workers (c=10; over HTTP each worker has its own keep-alive "
            f"connection to the same session, `Accept: application/json, text/event-stream`). Targets rotate "
            f"within each of the {rounds} rounds. Latency = request written → the response message with our id "
            f"read (for SSE: the stream's end). p50/p99 pool all rounds; throughput is the median of the "
            f"rounds' calls/s (all rounds listed). CPU per call: the load client's own (`/proc/self/stat`) and "
            f"the server side's (the front's whole process tree, fixture included, from `/proc`; for direct "
            f"stdio the fixture's from `wait4`), warm-up included. Both compete for the same 2 cores."
        )
        det.append("")
        det.append("| target | c=1 p50 | c=1 p99 | c=10 p50 | c=10 p99 | c=10 calls/s (rounds) | client CPU µs/call, c=1 / c=10 | server CPU µs/call |")
        det.append("|---|---|---|---|---|---|---|---|")
        for k in ("direct", "relay", "supergateway", "mcp-proxy", "builtin-direct", "builtin-relay"):
            if k not in a:
                continue
            p1, p10 = a[k]
            det.append(
                f"| {LABELS[k]} | {fmt_ms(ms(pct(p1['lat'], 50)))} ms | {fmt_ms(ms(pct(p1['lat'], 99)))} ms "
                f"| {fmt_ms(ms(pct(p10['lat'], 50)))} ms | {fmt_ms(ms(pct(p10['lat'], 99)))} ms "
                f"| {p10['tput']:.0f} ({', '.join(f'{x:.0f}' for x in p10['tputs'])}) "
                f"| {p1['client_us']:.0f} / {p10['client_us']:.0f} | {p1['server_us']:.0f} |"
            )
        det.append("")
    if mem:
        mb = mem["settled"]["rss"] / 1024
        empty = mem["empty"]["rss"] / 1024
        rows.append(
            f"| 6 | relay VmRSS with {mem['n']} connected daemons, steady state {mem['settle_s']:.0f} s after "
            f"they are ready | {mb:.1f} MiB "
            f"| the same relay with no daemon: {empty:.1f} MiB | — | < 50 MB with 100 "
            f"| {status(mem['settled']['rss'] * 1024 < 50e6) if mem['n'] == 100 else '(for 100 daemons)'} |"
        )
        per = (mb - empty) / mem["ready_after_settle"] if mem["ready_after_settle"] else float("inf")
        rows.append(
            f"| 6 | relay VmRSS per connected daemon ((steady state − no daemon) / {mem['ready_after_settle']}) "
            f"| {per:.3f} MiB | — | — | ≤ 0.15 MiB with 1,000 "
            f"| {status(per <= 0.15) if mem['n'] >= 1000 else '(for 1,000 daemons: `--relay-daemons 1000`)'} |"
        )
        rows.append(
            f"| 6 | relay VmRSS peak while the {mem['n']} daemons connect at once (their hellos are "
            f"parsed together; the heap is trimmed every 10 s) | {mem['connected']['rss'] / 1024:.1f} MiB "
            f"| — | — | — | (reported) |"
        )
        det.append(f"## Relay memory with {mem['n']} daemons, details")
        det.append("")
        det.append(
            f"`machine-mcp relay serve --listen 127.0.0.1:PORT --state-dir TMP` (token auth); {mem['n']} bridges added "
            f"with `machine-mcp relay bridge add bNNN` ({mem['enroll_s']:.1f} s), then {mem['n']} `machine-mcp connect "
            f"--relay URL --enroll CODE --workspace WS --state-dir TMP/daemon-NNN` processes started at once; all "
            f"{mem['ready']} daemon sockets were `ready` in `/metrics` after {mem['connect_s']:.1f} s "
            f"({mem['ready_after_settle']} still after the settle). "
            + (f"{mem['restarts']} times a `connect` process exited (enrollment refused) and was started again with the "
               f"same code (message: {'; '.join(cell(x) for x in mem['restart_reasons'])}). " if mem["restarts"] else "")
            + f"Median VmRSS of one daemon process: "
            f"{mem['daemon_rss_median'] / 1024:.1f} MiB. Relay CPU for the whole section: {mem['relay_cpu_s']:.2f} s."
        )
        det.append("")
        det.append("| relay state | VmRSS | VmHWM (peak) | threads |")
        det.append("|---|---|---|---|")
        for key, label in (("empty", "no daemon (1 s after start)"), ("connected", f"{mem['n']} daemons ready"),
                           ("settled", f"{mem['n']} daemons, {mem['settle_s']:.0f} s later")):
            s = mem[key]
            det.append(f"| {label} | {s['rss'] / 1024:.1f} MiB | {s['hwm'] / 1024:.1f} MiB | {s['threads']} |")
        det.append("")
    return rows, det
