#!/usr/bin/env python3
"""Benchmark driver for machine-mcp (Python 3 stdlib only).

Started by bench/run.sh, which builds the release binary, installs ripgrep and prepares the tree.
Every timed number is put next to a reference measured in the same run by the same client, so
the table reads as ratios; nothing here asserts an absolute time.

Measures:
  1. process start -> `initialize` response (ms, p50/p99), reference: the same client spawning
     `head -n 1` (a process that echoes the request line back): the spawn + pipe floor; and
     `machine-mcp stdio --no-supervisor` (the server without its supervisor, issue 20).
  2. read_file round trip for a 4 KiB and a 1 MiB file on one warm session (p50/p99),
     references: `ping` on the same session (JSON-RPC floor),
     `sed -u 'r FILE'` answering each request line with a line as long as the read_file response
     (the client's and the pipe's cost of moving that many bytes), and the same calls on a
     `--no-supervisor` session.
  3. search_text vs `rg` over a large tree, same query, alternating, median (ratio ours/rg).
  4. memory of the server when idle and after calls: PSS of its processes (supervisor and
     worker) summed, VmRSS of each; the same calls on a `--no-supervisor` server.
  5. processes (bench/processes.py): run_process ["true"] round trip; process-session output
     throughput over a 100 MB stream, ours vs @wonderwhy-er/desktop-commander vs a plain pipe.
  6. relay (bench/relay.py): a trivial tool call direct over stdio, through our relay,
     supergateway and mcp-proxy, one load client (bench/loadgen.rs); relay memory with 100
     connected daemons.
     relay-eras (bench/relay.py): a trivial tool call through one relay in both MCP eras, the
     legacy session era and 2026-07-28 (sessionless), the same load client, the same run.

  7. jobs (bench/jobs.py): `start_job` acceptance latency against `run_process` on the same
     session, and the time from a step's exit to a `read_job` long-poll showing it.
  7b. soak (bench/soak.py, only with `--only soak`): 4 clients making mixed calls for 30 minutes
     (`--soak-minutes`), the server's RSS sampled every minute under load and quiesced.
  8. abuse (bench/abuse.py, only with `--only abuse`): the relay under idle connections, slow
     bodies and headers, unverified daemon sockets and 8 MB initializes, while a legitimate
     client pings through it.
  9. faults (bench/faults.py, only with `--only faults`): the daemon link cut and restored, the
     daemon frozen (SIGSTOP), and a 10-minute flapping soak (`--faults-minutes`).
 10. supervisor (bench/supervisor.py): `ping` and `read_file` 4 KiB round trips through the stdio
     supervisor against `--no-supervisor`, interleaved call by call on two warm sessions, and
     c=10 throughput of both with bench/loadgen.rs.

`--only SECTION[,SECTION...]` runs a subset (startup, read_file, search, memory, processes, relay,
relay-eras, jobs, supervisor, soak, abuse, faults); without it, every section but soak, abuse and
faults runs.
"""

import argparse
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import abuse
import faults
import jobs
import processes
import relay
import soak
import supervisor
from common import (
    PROTOCOL,
    Session,
    cell,
    describe_procs,
    fmt_ms,
    init_request,
    kib_field,
    log,
    ms,
    pct,
    proc_status,
    snapshot,
    status,
    tree_cpu_seconds,
)

SECTIONS = ("startup", "read_file", "search", "memory", "processes", "relay", "relay-eras", "jobs", "supervisor",
            "soak", "abuse", "faults")
# soak (30 minutes), abuse (about 5 minutes) and faults (about 12 minutes) run only when named.
DEFAULT_SECTIONS = SECTIONS[:9]
PEER_VERSIONS = {"desktop-commander": "0.2.52", "supergateway": "4.0.0", "mcp-proxy": "6.7.19"}
PEERS = "@wonderwhy-er/desktop-commander 0.2.52, supergateway 4.0.0, mcp-proxy 6.7.19"


class Responder:
    """The client's floor for a response of N bytes: `sed -u 'r FILE'` answers each request line
    with the line itself followed by FILE (an N-byte line), read from the page cache each time."""

    def __init__(self, payload):
        fd, self.path = tempfile.mkstemp(prefix="mcp-bench-resp-")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        self.size = len(payload)
        self.p = subprocess.Popen(
            ["sed", "-u", f"r {self.path}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=1 << 20,
        )

    def round_trip(self):
        t0 = time.perf_counter_ns()
        self.p.stdin.write(b"x\n")
        self.p.stdin.flush()
        echo = self.p.stdout.readline()
        line = self.p.stdout.readline()
        t1 = time.perf_counter_ns()
        assert echo == b"x\n" and len(line) == self.size, (echo, len(line))
        return t1 - t0

    def close(self):
        self.p.stdin.close()
        self.p.wait()
        os.unlink(self.path)


# ---------------------------------------------------------------------------------------------
# 1. startup


def time_first_line(argv, line):
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0
    )
    p.stdin.write(line)
    out = b""
    while not out.endswith(b"\n"):
        chunk = p.stdout.read(65536)
        if not chunk:
            break
        out += chunk
    t1 = time.perf_counter_ns()
    p.stdin.close()
    p.stdout.close()
    p.wait()
    return t1 - t0, out


def bench_startup(binary, workspace, runs):
    """Spawn -> `initialize` answer of `machine-mcp stdio` (the supervisor, which starts its worker
    and has it answer), interleaved with the spawn floor and with `--no-supervisor`."""
    line = json.dumps(init_request(), separators=(",", ":")).encode() + b"\n"
    argv = [binary, "stdio", "--workspace", workspace]
    ours, floor, inproc = [], [], []
    for _ in range(3):  # warm the binary into the page cache
        time_first_line(argv, line)
        time_first_line(argv + ["--no-supervisor"], line)
    for _ in range(runs):
        for cmd, into in ((argv, ours), (argv + ["--no-supervisor"], inproc)):
            ns, out = time_first_line(cmd, line)
            resp = json.loads(out)
            assert resp.get("result", {}).get("protocolVersion") == PROTOCOL, out[:300]
            into.append(ns)
        ns, out = time_first_line(["head", "-n", "1"], line)
        assert out == line
        floor.append(ns)
    return ours, floor, inproc


# ---------------------------------------------------------------------------------------------
# 2. read_file


def make_text(size):
    """ASCII source-like text of exactly `size` bytes, ending in a newline."""
    line = b"    let value = compute(alpha, beta, gamma); // a line of plausible code text\n"
    n = size // len(line) + 1
    data = (line * n)[: size - 1] + b"\n"
    assert len(data) == size
    return data


def bench_read_file(binary, workspace, iters_small, iters_big):
    files = {"4 KiB": ("small.rs", 4 * 1024, iters_small), "1 MiB": ("big.rs", 1024 * 1024, iters_big)}
    for name, size, _ in files.values():
        with open(os.path.join(workspace, name), "wb") as f:
            f.write(make_text(size))
    s = Session(binary, workspace)
    # The same server without its supervisor (issue 20), open at the same time, called in turn.
    r = Session(argv=[binary, "stdio", "--workspace", workspace, "--no-supervisor"])
    results = {}
    try:
        # JSON-RPC floor on the same session.
        for _ in range(50):
            s.raw_request("ping")
            r.raw_request("ping")
        ping, ping_ref = [], []
        for _ in range(iters_small):
            ping.append(s.raw_request("ping")[0])
            ping_ref.append(r.raw_request("ping")[0])
        results["ping"] = {"ours": ping, "inproc": ping_ref, "resp_bytes": None}
        for label, (name, size, iters) in files.items():
            # The 1 MiB read asks for it (the default result stops at 42,999 bytes, issue 14).
            args = {"path": name} if size <= 42_999 else {"path": name, "max_bytes": size}
            _, resp, nbytes = s.call("read_file", args)
            sc = resp["result"]["structuredContent"]
            assert not sc.get("truncated"), f"{name} was truncated"
            assert len(sc["content"]) == size, (len(sc["content"]), size)
            # The reference answers with a line exactly as long as our response.
            ref = Responder(b"x" * (nbytes - 1) + b"\n")
            try:
                for _ in range(max(10, iters // 10)):
                    s.call("read_file", args)
                    r.call("read_file", args)
                    ref.round_trip()
                ours, floor, inproc = [], [], []
                call = {"name": "read_file", "arguments": args}
                for _ in range(iters):
                    ours.append(s.raw_request("tools/call", call)[0])
                    floor.append(ref.round_trip())
                    inproc.append(r.raw_request("tools/call", call)[0])
            finally:
                ref.close()
            results[label] = {"ours": ours, "floor": floor, "inproc": inproc, "resp_bytes": nbytes}
    finally:
        s.close()
        r.close()
    return results


# ---------------------------------------------------------------------------------------------
# 3. search


def rg_argv(rg, q, sort=False):
    argv = [
        rg,
        "--hidden",
        "-g",
        "!.git",
        "--no-heading",
        "--with-filename",
        "--column",
        "--color",
        "never",
        "--no-config",
    ]
    if sort:
        argv += ["--sort", "path"]
    if q.get("include"):
        for g in q["include"]:
            argv += ["-g", g]
    if q.get("files_only"):
        return argv + ["--files", "."]
    if q["literal"]:
        argv.append("-F")
    return argv + ["-e", q["pattern"], "--", "."]


def run_rg(argv, cwd):
    """Times rg from spawn to exit with its stdout fully read; returns (ns, lines, cpu s, maxrss KiB)."""
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    p.stdout.close()
    _, status, ru = os.wait4(p.pid, 0)
    t1 = time.perf_counter_ns()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1):  # 1 = no match
        raise RuntimeError(f"rg failed ({p.returncode}): {' '.join(argv)}")
    return t1 - t0, out.count(b"\n"), ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def search_args(q, max_matches):
    a = {"pattern": q["pattern"], "literal": q["literal"], "max_matches": max_matches}
    if q.get("include"):
        a["include"] = q["include"]
    return a


def bench_search(binary, rg, tree, queries, runs, max_matches):
    s = Session(binary, tree)
    rows = []
    try:
        for q in queries:
            args = search_args(q, max_matches)
            # warm-up: one of each (page cache, allocator, rg binary)
            _, resp, _ = s.call("search_text", args)
            sc = resp["result"]["structuredContent"]
            n_ours = len(sc["matches"])
            _, n_rg, _, _ = run_rg(rg_argv(rg, q), tree)
            if not q.get("include") and (n_ours == 0 or sc["files_searched"] < 1000):
                raise RuntimeError(
                    f"query {q['name']}: searched {sc['files_searched']} files, found {n_ours} matches; "
                    "is the tree ignored (e.g. by a .gitignore above it or at its top)?"
                )
            if not sc["complete"]:
                raise RuntimeError(
                    f"query {q['name']}: search_text stopped at max_matches={max_matches}; "
                    "pick a query with fewer matches so both sides do the full work"
                )
            ours, ours_cpu, ref, ref_cpu, ref_rss, ref_sorted = [], [], [], [], [], []
            for _ in range(runs):
                # The server's processes: the supervisor and the worker that searches.
                c0 = tree_cpu_seconds(s.pid)
                ns, resp, nbytes = s.call("search_text", args)
                ours_cpu.append(tree_cpu_seconds(s.pid) - c0)
                ours.append(ns)
                ns, n, cpu, rss = run_rg(rg_argv(rg, q), tree)
                ref.append(ns)
                ref_cpu.append(cpu)
                ref_rss.append(rss)
                if q.get("with_sorted"):
                    ref_sorted.append(run_rg(rg_argv(rg, q, sort=True), tree)[0])
            files_searched = resp["result"]["structuredContent"]["files_searched"]
            rows.append(
                {
                    "q": q,
                    "ours": ours,
                    "ours_cpu": ours_cpu,
                    "rg": ref,
                    "rg_cpu": ref_cpu,
                    "rg_rss": ref_rss,
                    "rg_sorted": ref_sorted,
                    "n_ours": n_ours,
                    "n_rg": n_rg,
                    "files_searched": files_searched,
                    "resp_bytes": nbytes,
                    "ours_hwm_kib": kib_field(proc_status(s.pid), "VmHWM"),
                }
            )
            log(
                f"  {q['name']}: ours {fmt_ms(ms(statistics.median(ours)))} ms, "
                f"rg {fmt_ms(ms(statistics.median(ref)))} ms, matches {n_ours}/{n_rg}"
            )
    finally:
        s.close()
    return rows


# ---------------------------------------------------------------------------------------------
# 4. memory




MEMORY_MODES = (("sup", []), ("inproc", ["--no-supervisor"]))


def bench_memory(binary, small_ws, tree, search_q, settle):
    """[(state, {"sup": snapshot, "inproc": snapshot})]: `machine-mcp stdio` (supervisor + worker)
    and `--no-supervisor`, the same calls, one session at a time (two sessions of one binary open
    at once would split its pages between them in PSS)."""
    small = "idle after 100 x read_file 4 KiB, 10 x 1 MiB, 20 x search_text (small dir)"
    for name, size in (("small.rs", 4 * 1024), ("big.rs", 1024 * 1024)):  # section 2's files, for --only memory
        if not os.path.exists(os.path.join(small_ws, name)):
            with open(os.path.join(small_ws, name), "wb") as f:
                f.write(make_text(size))
    out = {}
    for mode, extra in MEMORY_MODES:
        s = Session(argv=[binary, "stdio", "--workspace", small_ws] + extra)
        try:
            s.request("tools/list")
            time.sleep(settle)
            out.setdefault("idle after initialize + tools/list", {})[mode] = snapshot(s.pid)
            for _ in range(100):
                s.call("read_file", {"path": "small.rs"})
            for _ in range(10):
                s.call("read_file", {"path": "big.rs", "max_bytes": 1024 * 1024})
            for _ in range(20):
                s.call("search_text", {"pattern": "compute", "literal": True})
            time.sleep(settle)
            out.setdefault(small, {})[mode] = snapshot(s.pid)
        finally:
            s.close()
    for mode, extra in MEMORY_MODES:
        s = Session(argv=[binary, "stdio", "--workspace", tree] + extra)
        try:
            s.request("tools/list")
            for _ in range(3):
                s.call("search_text", search_args(search_q, 5000))
            time.sleep(settle)
            out.setdefault("idle after 3 x search_text over the large tree", {})[mode] = snapshot(s.pid)
        finally:
            s.close()
    return list(out.items())


# ---------------------------------------------------------------------------------------------
# report


def machine_info():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) // 1024} MiB"
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem": mem,
        "kernel": platform.release(),
        "load": os.getloadavg(),
    }


def paired_ratio(row):
    """Median over rounds of ours/rg, each pair measured back to back: load that drifts during
    the run hits both members of a pair, so this is steadier than a ratio of medians."""
    return statistics.median(o / r for o, r in zip(row["ours"], row["rg"]))


def cpu_busy_seconds():
    """CPU time spent busy by the whole machine since boot (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    """CPU time of this driver and every child it has reaped (servers, rg, head, sed)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def tool_version(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "?"

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--rg")
    ap.add_argument("--tree")
    ap.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                    help="comma-separated sections: " + ",".join(SECTIONS) + " (default: all but soak, abuse and faults)")
    ap.add_argument("--fixture", help="target/release/conformance-fixture (relay section)")
    ap.add_argument("--loadgen", help="bench/.cache/bin/loadgen (relay section)")
    ap.add_argument("--streamer", help="bench/.cache/bin/streamer (processes section)")
    ap.add_argument("--node", help="Node.js 22 for the peers (processes and relay sections)")
    ap.add_argument("--modules", help="node_modules with the pinned peers (bench/npm)")
    ap.add_argument("--producer", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "producer.py"))
    ap.add_argument("--process-calls", type=int, default=1000)
    ap.add_argument("--stream-bytes", type=int, default=100_000_000)
    ap.add_argument("--stream-rounds", type=int, default=3)
    ap.add_argument("--relay-rounds", type=int, default=3)
    ap.add_argument("--relay-c1", type=int, default=300)
    ap.add_argument("--relay-c10", type=int, default=2000)
    ap.add_argument("--relay-daemons", type=int, default=100,
                    help="daemons connected for the relay memory rows (default 100; the per-daemon target is for 1000)")
    ap.add_argument("--relay-settle", type=float, default=10.0)
    ap.add_argument("--soak-minutes", type=float, default=30.0, help="soak duration per mode (default 30; --quick: 2)")
    ap.add_argument("--soak-interval", type=float, default=60.0, help="seconds between soak samples (default 60; --quick: 10)")
    ap.add_argument("--soak-clients", type=int, default=4)
    ap.add_argument("--faults-minutes", type=float, default=10.0, help="flapping soak of the faults section (default 10; --quick: 1)")
    ap.add_argument("--soak-modes", default="stdio", help="stdio, up or stdio,up (default stdio)")
    ap.add_argument("--abuse-phases", default="",
                    help="abuse: only these phases, comma-separated (idle, slow-body, slow-auth, slow-head, ws-ping, ws-big, big-bodies, init-8mb, init-wide; default all)")
    ap.add_argument("--tree-desc", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reproduce", default="bash bench/run.sh")
    ap.add_argument("--startup-runs", type=int, default=200)
    ap.add_argument("--read-small", type=int, default=1000)
    ap.add_argument("--read-big", type=int, default=200)
    ap.add_argument("--search-runs", type=int, default=7)
    ap.add_argument("--supervisor-calls", type=int, default=2000, help="round trips per kind in the supervisor section")
    ap.add_argument("--quick", action="store_true", help="few iterations, for checking the script")
    a = ap.parse_args()
    if a.quick:
        a.startup_runs, a.read_small, a.read_big, a.search_runs = 20, 100, 20, 3
        a.process_calls, a.stream_bytes, a.stream_rounds = 100, 10_000_000, 1
        a.relay_rounds, a.relay_c1, a.relay_c10, a.relay_settle = 1, 50, 300, 2.0
        a.soak_minutes, a.soak_interval = min(a.soak_minutes, 2.0), min(a.soak_interval, 10.0)
        a.faults_minutes = min(a.faults_minutes, 1.0)
        a.supervisor_calls = 200
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    bad = [x for x in only if x not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {bad}; known: {','.join(SECTIONS)}")
    if ("search" in only or "memory" in only) and not (a.rg and a.tree):
        ap.error("the search and memory sections need --rg and --tree")
    if ("relay" in only or "relay-eras" in only) and not (a.fixture and a.loadgen):
        ap.error("the relay sections need --fixture and --loadgen")
    if "supervisor" in only and not a.loadgen:
        ap.error("the supervisor section needs --loadgen")
    if "processes" in only and not a.streamer:
        ap.error("the processes section needs --streamer")
    dc_js = os.path.join(a.modules, "@wonderwhy-er/desktop-commander/dist/index.js") if a.modules else None
    if dc_js and not os.path.exists(dc_js):
        dc_js = None
    if not (a.node and a.modules):
        log("no --node/--modules: the peers (desktop-commander, supergateway, mcp-proxy) are left out")

    info = machine_info()
    load_start = info["load"]
    t_start = time.time()
    busy_start, own_start, mono_start = cpu_busy_seconds(), own_cpu_seconds(), time.monotonic()

    queries = [
        {"name": "literal", "pattern": "PM_RESUME", "literal": True, "with_sorted": True},
        {"name": "regex", "pattern": r"[A-Z]+_RESUME", "literal": False, "with_sorted": True},
        {"name": "regex, rare (\\w+ + alternation)", "pattern": r"\w+(ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT)", "literal": False},
        # Walk only: the include glob matches no file, so neither side reads a file.
        {"name": "walk only (include glob matching no file)", "pattern": "x", "literal": True,
         "include": ["*.no-such-extension"]},
    ]

    res = {}
    n = len(only)
    step = iter(range(1, n + 1))
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as small_ws:
        if "startup" in only:
            log(f"{next(step)}/{n} startup ...")
            res["startup"] = bench_startup(a.bin, small_ws, a.startup_runs)
        if "read_file" in only:
            log(f"{next(step)}/{n} read_file ...")
            res["read_file"] = bench_read_file(a.bin, small_ws, a.read_small, a.read_big)
        if "search" in only:
            log(f"{next(step)}/{n} search_text vs rg ...")
            res["search"] = bench_search(a.bin, a.rg, a.tree, queries, a.search_runs, 5000)
        if "memory" in only:
            log(f"{next(step)}/{n} memory ...")
            res["memory"] = bench_memory(a.bin, small_ws, a.tree, queries[0], 3.0)
        if "processes" in only:
            log(f"{next(step)}/{n} processes ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-proc-") as pws:
                rp = processes.bench_run_process(a.bin, pws, a.process_calls)
                st = processes.bench_stream(a.bin, pws, a.producer, a.node, dc_js if a.node else None,
                                            a.streamer, a.stream_bytes, a.stream_rounds, a.stream_bytes // 5)
            res["processes"] = (rp, st)
        if "relay" in only:
            log(f"{next(step)}/{n} relay ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-relay-") as rws:
                load = relay.bench_relay_load(a.bin, a.fixture, a.node, a.modules, a.loadgen,
                                              a.relay_rounds, a.relay_c1, a.relay_c10, rws)
            log("  relay memory with daemons ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-relaymem-") as rws:
                mem100 = relay.bench_relay_memory(a.bin, a.relay_daemons, a.relay_settle, rws)
            res["relay"] = (load, mem100)
        if "relay-eras" in only:
            log(f"{next(step)}/{n} relay, both MCP eras ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-eras-") as rws:
                res["relay-eras"] = relay.bench_relay_eras(a.bin, a.fixture, a.loadgen, a.relay_rounds,
                                                           a.relay_c1, a.relay_c10, rws)
        if "jobs" in only:
            log(f"{next(step)}/{n} managed jobs ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-jobs-") as jws:
                res["jobs"] = jobs.bench_jobs(a.bin, jws, 30 if a.quick else 300, 10 if a.quick else 50)
        if "supervisor" in only:
            log(f"{next(step)}/{n} stdio supervisor vs --no-supervisor ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-sup-") as sws:
                res["supervisor"] = supervisor.bench_supervisor(
                    a.bin, sws, a.loadgen, a.supervisor_calls, a.relay_rounds, a.relay_c1, a.relay_c10)
        if "soak" in only:
            modes = [m.strip() for m in a.soak_modes.split(",") if m.strip()]
            log(f"{next(step)}/{n} soak ({', '.join(modes)}; {a.soak_minutes:g} min each) ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-soak-") as sws:
                res["soak"] = soak.bench_soak(a.bin, modes, a.soak_clients, a.soak_minutes, a.soak_interval, sws,
                                              os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if "abuse" in only:
            log(f"{next(step)}/{n} abuse ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-abuse-") as aws:
                res["abuse"] = abuse.bench_abuse(a.bin, aws, quick=a.quick,
                                                 only={p.strip() for p in a.abuse_phases.split(",") if p.strip()} or None)
        if "faults" in only:
            log(f"{next(step)}/{n} faults ({a.faults_minutes:g}-min flapping soak) ...")
            with tempfile.TemporaryDirectory(prefix="mcp-bench-faults-") as fws:
                res["faults"] = faults.bench_faults(a.bin, fws, minutes=a.faults_minutes,
                                                    rounds=3 if a.quick else faults.ROUNDS)

    load_end = os.getloadavg()
    elapsed = time.time() - t_start
    # CPUs kept busy by other processes during the run, on average: machine busy time minus ours.
    others = max(0.0, (cpu_busy_seconds() - busy_start) - (own_cpu_seconds() - own_start)) / (
        time.monotonic() - mono_start
    )

    L = []
    L.append("# machine-mcp benchmark results")
    L.append("")
    L.append(f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime(t_start))}, run took {elapsed:.0f} s")
    L.append(f"- Machine: {info['nproc']} CPUs ({info['cpu']}), {info['mem']} RAM, Linux {info['kernel']}")
    loaded = others > 0.25
    L.append(
        f"- Other processes kept {others:.2f} of {info['nproc']} CPUs busy on average during the run "
        f"(machine busy time from /proc/stat minus this benchmark's own processes); load average "
        f"(1/5/15 min) at start {load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}"
        + (" — ⚠️ loaded machine: numbers are noisier and rg's parallelism helps it less" if loaded
           else " — quiet machine")
    )
    L.append(f"- machine-mcp: `{tool_version([a.bin, '--version'])}` ({os.environ.get('BENCH_GIT_REV', '?')}), release profile")
    L.append(f"- rustc: `{os.environ.get('BENCH_RUSTC', '?')}`")
    if "search" in res:
        L.append(f"- reference: `{tool_version([a.rg, '--version'])}` ({os.environ.get('BENCH_RG_SOURCE', '?')})")
    if a.node and a.modules:
        L.append(f"- peers: Node.js `{tool_version([a.node, '--version'])}`; {PEERS} (npm ci of bench/npm/package-lock.json)")
    if "relay" in res or "relay-eras" in res or "supervisor" in res:
        L.append("- load client of the relay sections and of the supervisor's throughput rows: bench/loadgen.rs (std-only Rust, `rustc -O`), the same for every target")
    L.append(f"- client: Python {platform.python_version()} (stdlib), the same client for ours and the references (sections 1–5; "
             "the session stream of section 5 is read by bench/streamer.rs, compiled, for ours and its references alike, "
             "and once more by the Python client as a diagnostic)")
    if "soak" in res or "abuse" in res or "faults" in res:
        L.append("- clients of sections 7–9: Python (stdlib; threads for the soak, asyncio over raw sockets for the "
                 "attackers, a separate process for the legitimate client of section 8), on the same CPUs as the "
                 "servers they measure")
    if "search" in res or "memory" in res:
        L.append(f"- tree: {a.tree_desc}")
    L.append(f"- reproduce: `{a.reproduce}`")
    L.append("")

    L.append("## Summary")
    L.append("")
    L.append("| # | measure | ours | reference (same run) | ratio | target | status |")
    L.append("|---|---|---|---|---|---|---|")
    if "startup" in res:
        st_ours, st_floor, st_inproc = res["startup"]
        o50, o99 = ms(pct(st_ours, 50)), ms(pct(st_ours, 99))
        f50, f99 = ms(pct(st_floor, 50)), ms(pct(st_floor, 99))
        i50, i99 = ms(pct(st_inproc, 50)), ms(pct(st_inproc, 99))
        L.append(
            f"| 1 | start → `initialize` response, p50 / p99 ({len(st_ours)} runs; the supervisor starts its worker, "
            f"which answers) | {fmt_ms(o50)} / {fmt_ms(o99)} ms "
            f"| spawn floor (`head -n 1` echo): {fmt_ms(f50)} / {fmt_ms(f99)} ms | {o50 / f50:.2f}x / {o99 / f99:.2f}x "
            f"| p50 < 50 ms | {status(o50 < 50)} |"
        )
        L.append(
            f"| 1 | start → `initialize` response, `--no-supervisor` (one process), p50 / p99 ({len(st_inproc)} runs, "
            f"interleaved with the row above) | {fmt_ms(i50)} / {fmt_ms(i99)} ms "
            f"| spawn floor (same runs): {fmt_ms(f50)} / {fmt_ms(f99)} ms | {i50 / f50:.2f}x / {i99 / f99:.2f}x; "
            f"the supervisor adds {o50 - i50:+.2f} ms p50 | p50 < 50 ms | {status(i50 < 50)} |"
        )
    if "read_file" in res:
        rf = res["read_file"]
        ping, ping_in = rf["ping"]["ours"], rf["ping"]["inproc"]
        for label in ("4 KiB", "1 MiB"):
            r = rf[label]
            a50, a99 = ms(pct(r["ours"], 50)), ms(pct(r["ours"], 99))
            e50, e99 = ms(pct(r["floor"], 50)), ms(pct(r["floor"], 99))
            i50, i99 = ms(pct(r["inproc"], 50)), ms(pct(r["inproc"], 99))
            L.append(
                f"| 2 | `read_file` {label} round trip, p50 / p99 ({len(r['ours'])} calls) | {fmt_ms(a50)} / {fmt_ms(a99)} ms "
                f"| `sed -u 'r FILE'` answering with a line as long as our response ({r['resp_bytes'] / 1024:.0f} KiB): {fmt_ms(e50)} / {fmt_ms(e99)} ms "
                f"| {a50 / e50:.1f}x / {a99 / e99:.1f}x | — | (reported) |"
            )
            L.append(
                f"| 2 | `read_file` {label} round trip, `--no-supervisor` (same calls, interleaved) | {fmt_ms(i50)} / {fmt_ms(i99)} ms "
                f"| the same `sed` floor | {i50 / e50:.1f}x / {i99 / e99:.1f}x; the supervisor adds {a50 - i50:+.3f} ms p50 "
                f"| — | (reference) |"
            )
        L.append(
            f"| 2 | `ping` round trip, p50 / p99 ({len(ping)} calls) | {fmt_ms(ms(pct(ping, 50)))} / {fmt_ms(ms(pct(ping, 99)))} ms "
            f"| `--no-supervisor`, interleaved: {fmt_ms(ms(pct(ping_in, 50)))} / {fmt_ms(ms(pct(ping_in, 99)))} ms "
            f"| the supervisor adds {ms(pct(ping, 50)) - ms(pct(ping_in, 50)):+.3f} ms p50 | — | (JSON-RPC floor) |"
        )
    if "search" in res:
        sr = res["search"]
        for row in sr:
            q = row["q"]
            om, rm = ms(statistics.median(row["ours"])), ms(statistics.median(row["rg"]))
            ratio = paired_ratio(row)
            walk = bool(q.get("include"))
            shown = cell(q["pattern"] if not walk else "-g " + q["include"][0])
            L.append(
                f"| 3 | `search_text` {cell(q['name'])}: `{shown}`, median of {len(row['ours'])} "
                f"| {fmt_ms(om)} ms | `rg` {fmt_ms(rm)} ms | **{ratio:.2f}x** (paired) "
                + ("| — | (diagnostic) |" if walk else f"| ≤ 1.5x | {status(ratio <= 1.5)} |")
            )
    if "memory" in res:
        mem = res["memory"]
        for label, by in mem:
            sup, inp = by["sup"], by["inproc"]
            L.append(
                f"| 4 | memory, {label}: `machine-mcp stdio`, PSS of its {len(sup['procs'])} processes summed "
                f"(VmRSS of each beside it) | **{sup['pss'] / 1024:.1f} MiB** ({describe_procs(sup)}) "
                f"| `--no-supervisor`, same calls: PSS {inp['pss'] / 1024:.1f} MiB (row below) "
                f"| {sup['pss'] / inp['pss']:.2f}x | < 20 MiB | {status(sup['pss'] < 20 * 1024)} |"
            )
            L.append(
                f"| 4 | memory, {label}: `--no-supervisor`, PSS of its {len(inp['procs'])} process"
                f"{'es' if len(inp['procs']) > 1 else ''} (VmRSS beside it) | {inp['pss'] / 1024:.1f} MiB "
                f"({describe_procs(inp)}) | — | — | < 20 MiB | {status(inp['pss'] < 20 * 1024)} |"
            )
    details = []
    if "processes" in res:
        rows, det = processes.report(*res["processes"], dc_version=PEER_VERSIONS["desktop-commander"])
        L.extend(rows)
        details += det
    if "relay" in res:
        rows, det = relay.report(*res["relay"], a.relay_c1, a.relay_c10)
        L.extend(rows)
        details += det
    if "relay-eras" in res:
        rows, det = relay.report_eras(res["relay-eras"], a.relay_c1, a.relay_c10)
        L.extend(rows)
        details += det
    if "jobs" in res:
        rows, det = jobs.report(res["jobs"])
        L.extend(rows)
        details += det
    if "supervisor" in res:
        rows, det = supervisor.report(res["supervisor"])
        L.extend(rows)
        details += det
    if "soak" in res:
        rows, det = soak.report(res["soak"])
        L.extend(rows)
        details += det
    if "abuse" in res:
        rows, det = abuse.report(res["abuse"])
        L.extend(rows)
        details += det
    if "faults" in res:
        rows, det = faults.report(res["faults"])
        L.extend(rows)
        details += det
    L.append("")
    if "search" in res:
        sr = res["search"]

        L.append("## search_text vs rg, details")
        L.append("")
        L.append(
            "Ours: the `tools/call` round trip on a warm session (request written → response line read). "
            "rg: spawn → exit with its stdout read through a pipe (includes rg's own process start, a few ms). "
            "Runs alternate ours/rg after one warm-up each; the page cache was warmed before. Ratio = median "
            "over the rounds of ours/rg within each back-to-back pair (in the summary too). CPU = user+sys "
            "per search (ours: the server's processes, supervisor and worker, from /proc/PID/stat deltas; "
            "rg from wait4); its ratio "
            "depends little on load, while wall time favours rg on an idle machine (rg keeps both CPUs busy)."
        )
        L.append("")
        L.append(
            "| query | matches ours / rg | files searched (ours) | response | ours median (min–max) | rg median (min–max) "
            "| ratio | CPU s ours / rg | `rg --sort path` median |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|")
        for row in sr:
            q = row["q"]
            oc, rc = statistics.median(row["ours_cpu"]), statistics.median(row["rg_cpu"])
            srt = fmt_ms(ms(statistics.median(row["rg_sorted"]))) + " ms" if row["rg_sorted"] else "—"
            L.append(
                f"| {cell(q['name'])} | {row['n_ours']} / {row['n_rg']}{'' if row['n_ours'] == row['n_rg'] else ' ⚠️ differ'} "
                f"| {row['files_searched']} | {row['resp_bytes'] / 1024:.0f} KiB "
                f"| {fmt_ms(ms(statistics.median(row['ours'])))} ({fmt_ms(ms(min(row['ours'])))}–{fmt_ms(ms(max(row['ours'])))}) ms "
                f"| {fmt_ms(ms(statistics.median(row['rg'])))} ({fmt_ms(ms(min(row['rg'])))}–{fmt_ms(ms(max(row['rg'])))}) ms "
                f"| {paired_ratio(row):.2f}x "
                f"| {oc:.2f} / {rc:.2f} ({oc / rc:.2f}x) | {srt} |"
            )
        L.append("")
        q0 = sr[0]["q"]
        L.append(f"rg command (literal row): `{shlex.join(rg_argv('rg', q0))}` (regex rows without `-F`); "
                 f"ours: `search_text` with `max_matches: 5000` — every query has fewer matches, so the call returns "
                 f"`complete: true` (checked) and both sides search every file.")
        L.append("")

    if "memory" in res:
        mem = res["memory"]
        sr = res.get("search")
        L.append("## Memory details")
        L.append("")
        L.append(
            "Each state is measured on `machine-mcp stdio` (a supervisor and its worker, `stdio --worker`) and "
            "then on `machine-mcp stdio --no-supervisor` (one process), the same calls, one session at a time, "
            "3 s after the last call (the server trims its heap after 1 s idle). The server's processes are the "
            "pid the driver started and its descendants running the same executable (worker, `internal-watchdog`), "
            "not the processes calls start. PSS (from /proc/PID/smaps_rollup) divides each page by the number of "
            "processes that map it, so the binary's pages shared by supervisor and worker count once in the sum: "
            "the server's cost, compared with the target. VmRSS counts them in full in every process."
        )
        L.append("")
        L.append("| state | server | process | PSS | VmRSS | VmHWM (peak) | threads |")
        L.append("|---|---|---|---|---|---|---|")
        for label, by in mem:
            for mode, name in (("sup", "`machine-mcp stdio`"), ("inproc", "`--no-supervisor`")):
                snap = by[mode]
                for x in snap["procs"]:
                    L.append(f"| {label} | {name} | {x['role']} | {x['pss'] / 1024:.1f} MiB | {x['rss'] / 1024:.1f} MiB "
                             f"| {x['hwm'] / 1024:.1f} MiB | {x['threads']} |")
                if len(snap["procs"]) > 1:
                    L.append(f"| {label} | {name} | **sum** | **{snap['pss'] / 1024:.1f} MiB** "
                             f"| {snap['rss_sum'] / 1024:.1f} MiB | — | — |")
        L.append("")
        shared = max(by[m]["shared_with"] for _, by in mem for m in ("sup", "inproc"))
        if shared:
            L.append(f"⚠️ Up to {shared} other processes ran the same executable during a sample (they take a share "
                     "of its pages, so the PSS figures are a little low).")
        else:
            L.append("No other process ran the same executable during the samples (nothing else took a share of its pages).")
        L.append("")
        if sr:
            rg_rss = statistics.median(sr[0]["rg_rss"]) / 1024
            L.append(f"Reference: peak RSS of one `rg` process for the literal search over the same tree: {rg_rss:.1f} MiB.")
        L.append("")

    L.extend(details)

    text = "\n".join(L) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
