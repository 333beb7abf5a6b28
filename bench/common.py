"""Shared helpers of the benchmark driver (Python 3 stdlib only): percentiles, /proc readers and
a synchronous MCP stdio client."""

import json
import math
import os
import re
import subprocess
import sys
import time

PROTOCOL = "2025-11-25"
ID_HEAD = re.compile(rb'\{"jsonrpc":"2\.0","id":(\d+)[,}]')
# The TypeScript SDK puts the id last: {"result":...,"jsonrpc":"2.0","id":7}
ID_TAIL = re.compile(rb'"jsonrpc":"2\.0","id":(\d+)\}\s*$')


# ---------------------------------------------------------------------------------------------
# helpers


def pct(samples, p):
    """Nearest-rank percentile."""
    s = sorted(samples)
    k = max(1, math.ceil(p / 100.0 * len(s)))
    return s[k - 1]


def ms(ns):
    return ns / 1e6


def fmt_ms(x):
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def kib_field(st, key):
    return int(st[key].split()[0])


def proc_cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime is field 14, stime field 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def init_request(i=0):
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "machine-bridge-bench", "version": "1"},
        },
    }


class Session:
    """One MCP stdio session, driven synchronously: `Session(binary, workspace)` starts
    `machine-mcp stdio`; `Session(argv=[...], env=...)` any other stdio server."""

    def __init__(self, binary=None, workspace=None, argv=None, env=None, protocol=PROTOCOL, init_timeout=None):
        if argv is None:
            argv = [binary, "stdio", "--workspace", workspace]
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=1 << 20,
            env=env,
        )
        self.next_id = 1
        params = init_request()["params"]
        params["protocolVersion"] = protocol
        resp = self.request("initialize", params)
        assert "result" in resp, resp
        self.init_result = resp["result"]
        self.notify("notifications/initialized")

    @property
    def pid(self):
        return self.p.pid

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        self.p.stdin.flush()

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def raw_request(self, method, params=None):
        """Sends a request; returns (elapsed ns until the response line was read, raw line)."""
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        t0 = time.perf_counter_ns()
        self.p.stdin.write(data)
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"server closed stdout during {method}")
            # Skip notifications (progress, logging); the response carries our id. The id is
            # read from the line's head so that a large response is not parsed inside the timing.
            m = ID_HEAD.match(line) or ID_TAIL.search(line, max(0, len(line) - 64))
            if m:
                if int(m.group(1)) == rid:
                    t1 = time.perf_counter_ns()
                    return t1 - t0, line
                continue
            if b'"method"' in line[:200] and b'"id"' not in line[:200]:
                continue  # a notification
            try:
                if json.loads(line).get("id") == rid:
                    t1 = time.perf_counter_ns()
                    return t1 - t0, line
            except ValueError:
                pass

    def request(self, method, params=None):
        _, line = self.raw_request(method, params)
        return json.loads(line)

    def call(self, tool, args):
        """Times a tools/call; returns (ns, decoded response, response bytes)."""
        ns, line = self.raw_request("tools/call", {"name": tool, "arguments": args})
        resp = json.loads(line)
        if "error" in resp:
            raise RuntimeError(f"{tool}: {resp['error']}")
        if resp["result"].get("isError"):
            raise RuntimeError(f"{tool}: {resp['result']}")
        return ns, resp, len(line)

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def smaps_rollup(pid):
    """The kB fields of /proc/PID/smaps_rollup (Rss, Pss, Pss_Anon, Pss_File, ...)."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                out[k] = int(v.split()[0])
    return out


def _exe(pid):
    try:
        return os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        return None


def _cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def server_processes(pid):
    """The processes of the server started as `pid`: pid itself, then its descendants that run
    the same executable as the server's own processes do: the worker of a supervised
    `machine-mcp stdio` (`stdio --worker`) and the `internal-watchdog` (started before the first
    process a call runs). Not the processes that calls start (process sessions, `run_process`),
    nor anything below them. Returns [(pid, role)], role "supervisor" (pid, when it has a
    worker), "server" (pid, otherwise), "worker" or "watchdog"."""
    exe = _exe(pid)
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            try:
                argv = _cmdline(c)
            except OSError:
                continue
            if _exe(c) != exe:
                continue
            if b"internal-watchdog" in argv:
                out.append((c, "watchdog"))
            elif b"stdio" in argv and b"--worker" in argv:
                out.append((c, "worker"))
                todo.append(c)
    role = "supervisor" if any(r == "worker" for _, r in out) else "server"
    return [(pid, role)] + sorted(out, key=lambda x: (x[1] != "worker", x[0]))


def same_exe_elsewhere(pid, pids):
    """How many live processes outside `pids` run the executable of `pid`: they share its file
    pages, so the PSS of `pids` is lower than it would be on their own."""
    exe = _exe(pid)
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) not in pids and _exe(int(d)) == exe:
            n += 1
    return n


def snapshot(pid):
    """Memory of the server started as `pid`. `rss`, `hwm` and `threads` are of pid alone (the
    fields every section used before the stdio supervisor, issue 20); `procs` lists every
    process of the server (see `server_processes`) with its VmRSS, VmHWM, threads and PSS; `pss`
    is their PSS summed (from smaps_rollup: each page divided by the number of processes that map
    it, so the one binary's pages shared by supervisor, worker and watchdog count once: the
    server's real cost), `rss_sum` their VmRSS summed (which counts shared pages once per
    process), and `shared_with` the number of other processes running the same executable (they
    take a share of its pages, which lowers `pss`)."""
    st = proc_status(pid)
    out = {
        "rss": kib_field(st, "VmRSS"),
        "hwm": kib_field(st, "VmHWM"),
        "threads": int(st["Threads"]),
    }
    procs = []
    for p, role in server_processes(pid):
        try:
            ps = proc_status(p) if p != pid else st
            procs.append({"pid": p, "role": role, "rss": kib_field(ps, "VmRSS"), "hwm": kib_field(ps, "VmHWM"),
                          "threads": int(ps["Threads"]), "pss": smaps_rollup(p)["Pss"]})
        except (OSError, KeyError):
            continue  # gone meanwhile
    out["procs"] = procs
    out["pss"] = sum(x["pss"] for x in procs)
    out["rss_sum"] = sum(x["rss"] for x in procs)
    out["shared_with"] = same_exe_elsewhere(pid, {x["pid"] for x in procs})
    return out


def describe_procs(snap, key="rss"):
    """`supervisor 13.7 + worker 18.3 MiB` (VmRSS of each process of a snapshot)."""
    return " + ".join(f"{x['role']} {x[key] / 1024:.1f}" for x in snap["procs"]) + " MiB"


def descendants(pid):
    """pid and every live descendant (from /proc/*/stat parent links)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu_seconds(pid):
    """utime + stime of pid and its live descendants, seconds."""
    total = 0.0
    for p in descendants(pid):
        try:
            total += proc_cpu_seconds(p)
        except (OSError, IndexError, ValueError):
            pass
    return total


def cell(text):
    """Escapes a table cell (GFM also honours \\| inside code spans in tables)."""
    return text.replace("|", "\\|")


def status(ok):
    return "✅ met" if ok else "❌ missed"


def stop_process(p, timeout=5):
    """SIGTERM, then SIGKILL after timeout; for subprocess.Popen objects we started."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
