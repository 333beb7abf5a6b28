"""Benchmark section 7 (`--only soak`, issue 11): a soak. N clients (default 4) make mixed calls
for M minutes (default 30) and the server's resident memory is sampled every minute; the result
is the RSS curve, calls/s and error counts. Not part of the default run (30 minutes).

Modes (`--soak-modes`, default `stdio`):
- `stdio`: one `machine-mcp stdio --workspace WS`; the N clients are N threads that share its
  pipes (distinct request ids, responses handed back by id), so up to N calls run in the server at
  once, as from a host that runs tool calls concurrently.
- `up`: one `machine-mcp up --auth token --json` (relay + daemon + runtime in one process, on
  loopback); the N clients are N threads, each with its own keep-alive HTTP connection and its own
  MCP session at `/b/local/mcp`, closed (`DELETE`) and opened again every SESSION_CYCLES cycles.

Each client loops over one cycle of calls (see CYCLE): read_file of a 4 KiB and a 1 MiB file and a
line range in the tree; search_text (a literal and a regex) and list_files over the tree;
write_file + edit_file on the client's own scratch file; run_process `echo`; a process session that
runs to its exit (start_process + read_process with wait_for_exit); a process session that is
killed (start_process `sleep 60` + read_process + kill_process + read_process); list_processes;
ping. The tree is this repository at HEAD (`git archive HEAD`, unpacked into the workspace): a
real source tree, small enough that searches do not dominate the mix.

Sampled every interval (60 s; 10 s with --quick): the PSS of the server's processes summed (the
figure judged; since issue 20 `machine-mcp stdio` is a supervisor and a worker, `stdio --worker`,
and PSS counts the binary's pages they share once: see common.snapshot), VmRSS, VmHWM, threads
and open fds of the process that serves the calls (the worker; in mode `up`, and for a
`--no-supervisor` server, the server process), the supervisor's VmRSS, the RSS of the watchdog
(`internal-watchdog`, a child that outlives nothing) and of any other live descendants (the
processes the calls start), their count, and (mode `up`) the relay's session gauge from /metrics.
Around the load: the idle PSS after a warm-up cycle of each client and 3 s without calls (the
server trims its heap after 1 s idle), and the same after the soak. The idle figures compare
retained memory without the in-flight buffers of a busy server; the curve under load shows
whether it grows.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

from common import cell, descendants, fmt_ms, kib_field, log, ms, pct, proc_status, snapshot, status, stop_process
from mcpclients import CallError, HttpSession, StdioMux, check_result

SESSION_CYCLES = 25  # mode up: an MCP session is closed and another opened every this many cycles
IDLE_SETTLE = {"stdio": 3.0, "up": 11.0}  # s without a call before a quiesced sample: the stdio
# server trims its heap after 1 s idle, the relay in `up` every 10 s


def _text(size, tag):
    line = f"    let value = compute(alpha, beta, gamma); // {tag} soak text line\n".encode()
    data = (line * (size // len(line) + 1))[: size - 1] + b"\n"
    return data


def prepare_workspace(ws, repo_root, clients):
    """small.txt (4 KiB), big.txt (1 MiB), tree/ (git archive HEAD), scratch/."""
    with open(os.path.join(ws, "small.txt"), "wb") as f:
        f.write(_text(4096, "small"))
    with open(os.path.join(ws, "big.txt"), "wb") as f:
        f.write(_text(1 << 20, "big"))
    tree = os.path.join(ws, "tree")
    os.makedirs(tree)
    rev = subprocess.run(["git", "-C", repo_root, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    arch = subprocess.Popen(["git", "-C", repo_root, "archive", "HEAD"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", tree], stdin=arch.stdout, check=True)
    arch.stdout.close()
    if arch.wait() != 0:
        raise RuntimeError("git archive HEAD failed")
    nfiles, nbytes = 0, 0
    for d, _, fs in os.walk(tree):
        for n in fs:
            nfiles += 1
            nbytes += os.path.getsize(os.path.join(d, n))
    os.makedirs(os.path.join(ws, "scratch"))
    return {"rev": rev, "files": nfiles, "bytes": nbytes}


# ---------------------------------------------------------------------------------------------
# the mix


def cycle(client, cid, n):
    """One cycle of client `cid` (iteration n): yields (label, method, params, check) where check
    is called with the result and may raise CallError; the generator receives each result."""
    scratch = f"scratch/c{cid}.txt"
    content = "".join(f"line {i} of client {cid}: ITER-{n}-{i}\n" for i in range(200))
    yield "read_file 4 KiB", "tools/call", {"name": "read_file", "arguments": {"path": "small.txt"}}, \
        lambda r: _expect(len(r["structuredContent"]["content"]) == 4096, "read_file: short content")
    yield "search_text literal", "tools/call", {"name": "search_text", "arguments": {
        "pattern": "Result<", "literal": True, "path": "tree", "max_matches": 200}}, \
        lambda r: _expect(len(r["structuredContent"]["matches"]) > 0, "search_text: no match")
    yield "write_file", "tools/call", {"name": "write_file", "arguments": {"path": scratch, "content": content}}, None
    yield "edit_file", "tools/call", {"name": "edit_file", "arguments": {
        "path": scratch, "old_text": f"ITER-{n}-100\n", "new_text": f"EDITED-{n}-100\n"}}, None
    yield "run_process echo", "tools/call", {"name": "run_process", "arguments": {"argv": ["echo", f"soak {cid} {n}"]}}, \
        lambda r: _expect(r["structuredContent"].get("exit_code") == 0, "run_process: exit code")
    yield "list_files", "tools/call", {"name": "list_files", "arguments": {"path": "tree"}}, \
        lambda r: _expect(len(r["structuredContent"]["files"]) > 10, "list_files: too few files")
    yield "read_file 1 MiB", "tools/call", {"name": "read_file", "arguments": {"path": "big.txt", "max_bytes": 1 << 20}}, \
        lambda r: _expect(len(r["structuredContent"]["content"]) == 1 << 20, "read_file: short content")
    yield "search_text regex", "tools/call", {"name": "search_text", "arguments": {
        "pattern": r"fn\s+\w+_(test|limit|max)\w*", "path": "tree", "max_matches": 500}}, None
    r = yield "start_process (runs to exit)", "tools/call", {"name": "start_process", "arguments": {
        "argv": ["sh", "-c", "i=0; while [ $i -lt 20 ]; do echo line $i; i=$((i+1)); done; sleep 0.05"]}}, None
    sid = r["structuredContent"]["session_id"]
    yield "read_process wait_for_exit", "tools/call", {"name": "read_process", "arguments": {
        "session_id": sid, "wait_for_exit": True, "wait_ms": 10000}}, \
        lambda r: _expect(r["structuredContent"].get("exit_code") == 0, f"read_process: not exited 0: {str(r['structuredContent'])[:200]}")
    r = yield "start_process (killed)", "tools/call", {"name": "start_process", "arguments": {"argv": ["sleep", "60"]}}, None
    sid = r["structuredContent"]["session_id"]
    yield "read_process", "tools/call", {"name": "read_process", "arguments": {"session_id": sid, "wait_ms": 20}}, None
    yield "kill_process", "tools/call", {"name": "kill_process", "arguments": {"session_id": sid}}, None
    yield "read_process after kill", "tools/call", {"name": "read_process", "arguments": {"session_id": sid}}, \
        lambda r: _expect(not r["structuredContent"].get("running"), "read_process: still running after kill")
    yield "list_processes", "tools/call", {"name": "list_processes", "arguments": {}}, None
    yield "read_file range", "tools/call", {"name": "read_file", "arguments": {
        "path": "tree/Cargo.toml", "start_line": 1, "end_line": 20}}, None
    yield "ping", "ping", None, None


def _expect(ok, what):
    if not ok:
        raise CallError(what.split(":")[0] + ": unexpected result", what)


class Gate:
    """Lets the sampler pause every client between calls (to take an idle sample) and resume."""

    def __init__(self):
        self.go = threading.Event()
        self.go.set()
        self.cv = threading.Condition()
        self.inflight = 0

    def wrap(self, call):
        def gated(*args, **kw):
            self.go.wait()
            with self.cv:
                self.inflight += 1
            try:
                return call(*args, **kw)
            finally:
                with self.cv:
                    self.inflight -= 1
                    self.cv.notify_all()
        return gated

    def pause(self, timeout=90):
        """Stops new calls and waits for the running ones; False if they did not end in time."""
        self.go.clear()
        with self.cv:
            return self.cv.wait_for(lambda: self.inflight == 0, timeout)

    def resume(self):
        self.go.set()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.errors = {}
        self.lat = {}  # label -> [ns]
        self.minute_lat = []  # (t, ns) of every call, for per-interval percentiles
        self.cycles = 0
        self.sessions_opened = 0

    def ok(self, label, ns):
        with self.lock:
            self.calls += 1
            self.lat.setdefault(label, []).append(ns)
            self.minute_lat.append((time.monotonic(), ns))

    def err(self, label, e):
        key = f"{label} — {e.kind}"
        with self.lock:
            self.calls += 1
            ent = self.errors.setdefault(key, [0, e.detail[:200]])
            ent[0] += 1


def run_client(transport, cid, stats, stop, first_cycle_done):
    """transport: callable(method, params) -> (ns, msg); runs cycles until stop is set."""
    n = 0
    while not stop.is_set():
        gen = cycle(None, cid, n)
        send = None
        try:
            while True:
                label, method, params, check = gen.send(send)
                send = None
                try:
                    ns, msg = transport["call"](method, params)
                    if method == "tools/call":
                        res = check_result(params["name"], msg)
                        if check:
                            check(res)
                        send = res
                    elif "error" in msg:
                        raise CallError(f"{method}: JSON-RPC error", str(msg["error"])[:200])
                    stats.ok(label, ns)
                except CallError as e:
                    stats.err(label, e)
                    if e.kind.startswith("transport: server gone"):
                        stop.set()
                        return
                    # a failed start_process leaves nothing to read: skip the rest of the cycle
                    if label.startswith("start_process"):
                        break
        except StopIteration:
            pass
        n += 1
        with stats.lock:
            stats.cycles += 1
        if n == 1:
            first_cycle_done.release()
        if "cycle_done" in transport:
            transport["cycle_done"](n)


# ---------------------------------------------------------------------------------------------
# sampling


def sample(pid, metrics_port=None):
    """`pss`: the server's processes summed (judged); `rss`, `hwm`, `threads`, `fds`: the process
    that serves the calls (the worker of a supervised `machine-mcp stdio`, else pid);
    `supervisor_rss`: pid's VmRSS when it is a supervisor, else None."""
    snap = snapshot(pid)
    serving = next((x for x in snap["procs"] if x["role"] == "worker"), snap["procs"][0])
    out = {"pss": snap["pss"], "rss": serving["rss"], "hwm": serving["hwm"], "threads": serving["threads"],
           "supervisor_rss": snap["rss"] if serving["pid"] != pid else None}
    try:
        out["fds"] = len(os.listdir(f"/proc/{serving['pid']}/fd"))
    except OSError:
        out["fds"] = None
    ours = {x["pid"] for x in snap["procs"]}
    wd = sum(x["rss"] for x in snap["procs"] if x["role"] == "watchdog")
    other, nother = 0, 0
    for d in descendants(pid):
        if d in ours:
            continue
        try:
            rss = kib_field(proc_status(d), "VmRSS")
        except (OSError, KeyError):
            continue
        other += rss
        nother += 1
    out["watchdog_rss"] = wd
    out["children_rss"] = other
    out["children"] = nother
    if metrics_port:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
            m = re.search(r"^machine_mcp_relay_sessions (\S+)$", text, re.M)
            out["relay_sessions"] = int(float(m.group(1))) if m else None
        except OSError:
            out["relay_sessions"] = None
    return out


def wait_idle_and_sample(pid, metrics_port=None, settle=3.0):
    time.sleep(settle)
    return sample(pid, metrics_port)


# ---------------------------------------------------------------------------------------------
# one soak run


def soak_run(binary, mode, clients, minutes, interval, workdir, repo_root):
    ws = os.path.join(workdir, f"ws-{mode}")
    os.makedirs(ws)
    tree = prepare_workspace(ws, repo_root, clients)
    stats = Stats()
    gate = Gate()
    stop = threading.Event()
    first = threading.Semaphore(0)
    server = None
    muxes = []
    metrics_port = None
    log_path = os.path.join(workdir, f"soak-{mode}.log")
    if mode == "stdio":
        mux = StdioMux([binary, "stdio", "--workspace", ws], stderr=open(log_path, "wb"))
        server = mux.p
        transports = [{"call": gate.wrap(mux.request)} for _ in range(clients)]
        muxes.append(mux)
        server_desc = f"`machine-mcp stdio --workspace WS`, {clients} client threads sharing its pipes"
    elif mode == "up":
        import socket as _s
        with _s.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        metrics_port = port
        server = subprocess.Popen(
            [binary, "up", "--auth", "token", "--json", "--workspace", ws, "--state-dir",
             os.path.join(workdir, "state-up"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn"],
            stdout=subprocess.PIPE, stderr=open(log_path, "wb"), start_new_session=True)
        line = server.stdout.readline()
        if not line:
            raise RuntimeError(f"up: no JSON on stdout (exit {server.poll()})")
        info = json.loads(line)
        transports = []
        for _ in range(clients):
            hs = HttpSession(info["mcp_url"], info["token"])
            hs.open()
            stats.sessions_opened += 1

            def cycle_done(n, hs=hs):
                if n % SESSION_CYCLES == 0:
                    gate.wrap(hs.delete)()
                    try:
                        ns = gate.wrap(hs.open)()
                        stats.ok("new MCP session (DELETE + initialize)", ns)
                    except CallError as e:
                        stats.err("new MCP session (DELETE + initialize)", e)
                    with stats.lock:
                        stats.sessions_opened += 1

            transports.append({"call": gate.wrap(hs.request), "cycle_done": cycle_done, "hs": hs})
        server_desc = (f"`machine-mcp up --auth token` (relay + daemon + runtime in one process), {clients} "
                       f"HTTP clients, each its own keep-alive connection and MCP session, a new session "
                       f"every {SESSION_CYCLES} cycles")
    else:
        raise ValueError(mode)
    out = {"mode": mode, "clients": clients, "minutes": minutes, "interval": interval, "tree": tree,
           "server_desc": server_desc, "samples": [], "crash": None}
    threads = []
    try:
        out["start"] = sample(server.pid, metrics_port)
        # warm-up: one cycle per client, then idle
        warm_stop = threading.Event()
        for i, t in enumerate(transports):
            th = threading.Thread(target=_one_cycle, args=(t, i, stats), daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        threads = []
        out["warm_errors"] = dict(stats.errors)
        stats.errors = {}
        out["idle_before"] = wait_idle_and_sample(server.pid, metrics_port, IDLE_SETTLE[mode])
        stats.calls, stats.cycles, stats.lat, stats.minute_lat = 0, 0, {}, []
        log(f"  soak {mode}: {clients} clients for {minutes} min, idle PSS before "
            f"{out['idle_before']['pss'] / 1024:.1f} MiB")
        t0 = time.monotonic()
        for i, t in enumerate(transports):
            th = threading.Thread(target=run_client, args=(t, i, stats, stop, first), daemon=True)
            th.start()
            threads.append(th)
        end = t0 + minutes * 60
        next_t = t0 + interval
        last_calls, last_t = 0, t0
        while True:
            now = time.monotonic()
            if stop.is_set() or server.poll() is not None:
                out["crash"] = f"server exited with {server.poll()}" if server.poll() is not None else "a client stopped"
                break
            if now >= next_t:
                s = sample(server.pid, metrics_port)
                with stats.lock:
                    calls = stats.calls
                    errs = sum(v[0] for v in stats.errors.values())
                    lats = [ns for (t, ns) in stats.minute_lat if t >= last_t]
                    stats.minute_lat = [x for x in stats.minute_lat if x[0] >= now]
                s["t"] = now - t0
                s["calls"] = calls - last_calls
                s["calls_per_s"] = (calls - last_calls) / (now - last_t)
                s["errors_total"] = errs
                s["p50_ms"] = ms(pct(lats, 50)) if lats else None
                s["p99_ms"] = ms(pct(lats, 99)) if lats else None
                # the quiesced sample: no call running for IDLE_SETTLE s
                tq = time.monotonic()
                drained = gate.pause()
                time.sleep(IDLE_SETTLE[mode])
                q = sample(server.pid, metrics_port)
                q["drained"] = drained
                gate.resume()
                s["idle"] = q
                s["pause_s"] = time.monotonic() - tq
                out["samples"].append(s)
                log(f"    {s['t'] / 60:5.1f} min: PSS {s['pss'] / 1024:.1f} MiB under load, {q['pss'] / 1024:.1f} MiB "
                    f"quiesced, fds {s['fds']}/{q['fds']}, threads {s['threads']}, {s['calls_per_s']:.0f} calls/s, errors {errs}")
                now = time.monotonic()
                last_calls, last_t = calls, now
                next_t += interval
                if now >= end - 0.5:
                    break
            time.sleep(min(0.5, max(0.01, next_t - time.monotonic())))
        stop.set()
        for th in threads:
            th.join(timeout=120)
        out["hung_clients"] = sum(1 for th in threads if th.is_alive())
        out["elapsed_s"] = time.monotonic() - t0
        out["calls"] = stats.calls
        out["cycles"] = stats.cycles
        out["errors"] = {k: v for k, v in stats.errors.items()}
        out["lat"] = {k: (ms(pct(v, 50)), ms(pct(v, 99)), len(v)) for k, v in stats.lat.items()}
        out["sessions_opened"] = stats.sessions_opened
        if server.poll() is None:
            out["idle_after"] = wait_idle_and_sample(server.pid, metrics_port, IDLE_SETTLE[mode])
            out["cpu_s"] = _cpu(server.pid)
    finally:
        stop.set()
        for t in transports:
            if "hs" in t:
                try:
                    t["hs"].close()
                except Exception:  # noqa: BLE001 - best effort at the end
                    pass
        for m in muxes:
            m.close()
        if mode == "up":
            try:
                os.killpg(server.pid, 15)
            except ProcessLookupError:
                pass
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait()
    return out


def _cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _one_cycle(transport, cid, stats):
    stop = threading.Event()
    sem = threading.Semaphore(0)

    def done(n, _orig=transport.get("cycle_done")):
        stop.set()

    t = dict(transport)
    t["cycle_done"] = done
    run_client(t, cid + 100, stats, stop, sem)


def bench_soak(binary, modes, clients, minutes, interval, workdir, repo_root):
    return [soak_run(binary, m, clients, minutes, interval, workdir, repo_root) for m in modes]


# ---------------------------------------------------------------------------------------------
# report


def _slope(points):
    """Least-squares slope of (x, y) points."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def analyse(run):
    """Figures of the curve: under load (`pss`) and quiesced (`idle.pss`), MiB."""
    s = run["samples"]
    if not s:
        return {}
    mib = lambda k: k / 1024  # noqa: E731
    t_end = s[-1]["t"]
    half = [x for x in s if x["t"] >= t_end / 2]
    q = [mib(x["idle"]["pss"]) for x in s]
    load = [mib(x["pss"]) for x in s]
    return {
        "first": load[0], "last": load[-1], "max": max(load),
        "max_at": s[load.index(max(load))]["t"] / 60,
        "q_first": q[0], "q_last": q[-1], "q_max": q and max(q),
        "q_max_at": s[q.index(max(q))]["t"] / 60,
        "slope_load": _slope([(x["t"] / 60, mib(x["pss"])) for x in half]),
        "slope_idle": _slope([(x["t"] / 60, mib(x["idle"]["pss"])) for x in half]),
        "q_rss": (mib(s[0]["idle"]["rss"]), mib(s[-1]["idle"]["rss"]), max(mib(x["idle"]["rss"]) for x in s)),
        "half_min": (t_end - half[0]["t"]) / 60,
        "fds": (min(x["fds"] or 0 for x in s), max(x["fds"] or 0 for x in s)),
        "q_fds": (min(x["idle"]["fds"] or 0 for x in s), max(x["idle"]["fds"] or 0 for x in s)),
        "threads": (min(x["threads"] for x in s), max(x["threads"] for x in s)),
        "children": max(x["children"] for x in s),
        "calls_per_s": statistics.median(x["calls_per_s"] for x in s),
        "minutes": t_end / 60,
    }


# Bounded: the quiesced PSS gains less than this over the second half of the run (the
# least-squares line through the quiesced samples of the second half, times its length), and
# the server neither crashed nor left a client hanging.
BOUNDED_GROWTH_MIB = 2.0


def report(runs):
    rows, det = [], []
    for run in runs:
        a = analyse(run)
        errs = sum(v[0] for v in run.get("errors", {}).values())
        ib, ia = run["idle_before"]["pss"] / 1024, (run.get("idle_after") or {}).get("pss", 0) / 1024
        serving = "worker" if run["idle_before"].get("supervisor_rss") is not None else "server"
        if not a:
            rows.append(f"| 7 | soak ({run['mode']}) | no sample | — | — | bounded | ❌ {run.get('crash')} |")
            continue
        growth = a["slope_idle"] * a["half_min"]
        bounded = growth < BOUNDED_GROWTH_MIB and not run.get("crash") and not run.get("hung_clients")
        rows.append(
            f"| 7 | soak, {run['mode']}: server PSS (its processes summed) over {a['minutes']:.0f} min of {run['clients']} clients "
            f"({run['calls']} calls, median {a['calls_per_s']:.0f} calls/s, {errs} errors), quiesced each "
            f"{run['interval']:.0f} s (no call for {IDLE_SETTLE[run['mode']]:.0f} s) "
            f"| quiesced: first {a['q_first']:.1f}, last {a['q_last']:.1f}, max {a['q_max']:.1f} MiB (at {a['q_max_at']:.0f} min); "
            f"under load: first {a['first']:.1f}, last {a['last']:.1f}, max {a['max']:.1f} MiB; {serving} VmRSS quiesced: "
            f"first {a['q_rss'][0]:.1f}, last {a['q_rss'][1]:.1f}, max {a['q_rss'][2]:.1f} MiB "
            f"| idle before the soak (after 1 warm-up cycle per client): {ib:.1f} MiB; idle after: {ia:.1f} MiB "
            f"| second half: {a['slope_idle']:+.3f} MiB/min quiesced ({growth:+.1f} MiB over {a['half_min']:.0f} min), "
            f"{a['slope_load']:+.3f} MiB/min under load "
            f"| bounded (< {BOUNDED_GROWTH_MIB:.0f} MiB growth over the second half) | {status(bounded)} |"
        )
        det.append(f"## Soak ({run['mode']}), details")
        det.append("")
        det.append(
            f"{run['server_desc']}; tree: this repository at {run['tree']['rev']} (`git archive HEAD`: "
            f"{run['tree']['files']} files, {run['tree']['bytes'] / 1e6:.1f} MB). Each client loops over one cycle "
            f"of {len(CYCLE_LABELS) - 1} calls ({', '.join(CYCLE_LABELS[:-1])}). Sampled every {run['interval']:.0f} s; "
            f"PSS = the server's processes summed (supervisor, worker and watchdog, or the one server process and its "
            f"watchdog; the binary's shared pages count once), the figure judged; VmRSS, VmHWM, threads and fds of the "
            f"process that serves the calls (the worker of a supervised `machine-mcp stdio`); supervisor = the "
            f"supervisor's own VmRSS; watchdog = the `internal-watchdog` child; children = other live "
            f"descendants (the processes the calls start) at the sample. Latency: every call of the interval "
            f"pooled. Each sample under load is followed by a quiesced one: the clients stop between calls, and "
            f"once no call has run for {IDLE_SETTLE[run['mode']]:.0f} s (the stdio server trims its heap after 1 s idle; "
            f"the relay in `up` every 10 s) the server is sampled again, then the clients go on (calls/s excludes these pauses). "
            f"Cycles completed: {run['cycles']}"
            + (f"; MCP sessions opened: {run['sessions_opened']}" if run["mode"] == "up" else "")
            + f"; server CPU {run.get('cpu_s', 0):.0f} s over {run.get('elapsed_s', 0) / 60:.1f} min."
            + (f" ⚠️ {run['crash']}." if run.get("crash") else "")
            + (f" ⚠️ {run['hung_clients']} client threads did not finish within 120 s of the stop." if run.get("hung_clients") else "")
        )
        det.append("")
        rs = run["mode"] == "up"
        det.append(f"| t (min) | PSS under load | quiesced | {serving} VmRSS under load | quiesced | VmHWM | threads "
                   "| open fds load / quiesced | supervisor RSS | watchdog RSS | children (RSS) | calls/s | p50 / p99 "
                   "| errors (cumulative) |" + (" relay sessions |" if rs else ""))
        det.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if rs else ""))
        for x in [dict(run["idle_before"], t=None, label="idle before")] + run["samples"] + (
                [dict(run["idle_after"], t=None, label="idle after")] if run.get("idle_after") else []):
            t = x.get("label") or f"{x['t'] / 60:.1f}"
            lat = f"{fmt_ms(x['p50_ms'])} / {fmt_ms(x['p99_ms'])} ms" if x.get("p50_ms") is not None else "—"
            cps = f"{x['calls_per_s']:.0f}" if "calls_per_s" in x else "—"
            qi = x.get("idle")
            qs = f"{qi['pss'] / 1024:.1f} MiB" + ("" if qi.get("drained", True) else " (calls still running)") if qi else "—"
            qr = f"{qi['rss'] / 1024:.1f} MiB" if qi else "—"
            fds = f"{x['fds']} / {qi['fds']}" if qi else f"{x['fds']}"
            sup = f"{x['supervisor_rss'] / 1024:.1f} MiB" if x.get("supervisor_rss") is not None else "—"
            det.append(
                f"| {t} | {x['pss'] / 1024:.1f} MiB | {qs} | {x['rss'] / 1024:.1f} MiB | {qr} | {x['hwm'] / 1024:.1f} MiB "
                f"| {x['threads']} | {fds} | {sup} "
                f"| {x['watchdog_rss'] / 1024:.1f} MiB | {x['children']} ({x['children_rss'] / 1024:.1f} MiB) | {cps} | {lat} "
                f"| {x.get('errors_total', '—')} |" + (f" {x.get('relay_sessions')} |" if rs else ""))
        det.append("")
        det.append("| call | calls | p50 | p99 |")
        det.append("|---|---|---|---|")
        for label in CYCLE_LABELS:
            if label in run["lat"]:
                p50, p99, n = run["lat"][label]
                det.append(f"| {cell(label)} | {n} | {fmt_ms(p50)} ms | {fmt_ms(p99)} ms |")
        det.append("")
        if run.get("errors"):
            det.append("Errors:")
            det.append("")
            for k, (n, d) in sorted(run["errors"].items(), key=lambda kv: -kv[1][0]):
                det.append(f"- {n} × {cell(k)}: `{cell(d)}`")
            det.append("")
        if run.get("warm_errors"):
            det.append(f"Errors in the warm-up cycle: {run['warm_errors']}")
            det.append("")
    return rows, det


CYCLE_LABELS = [
    "read_file 4 KiB", "search_text literal", "write_file", "edit_file", "run_process echo", "list_files",
    "read_file 1 MiB", "search_text regex", "start_process (runs to exit)", "read_process wait_for_exit",
    "start_process (killed)", "read_process", "kill_process", "read_process after kill", "list_processes",
    "read_file range", "ping", "new MCP session (DELETE + initialize)",
]
