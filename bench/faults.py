"""Benchmark section 9 (`--only faults`, issue 15): the relay and daemon link under faults. Not
part of the default run, and not a test: it reports what happens.

Setup: `machine-mcp relay serve --auth token` on loopback with `--public-url` naming a TCP proxy
of this script (FaultProxy) in front of it; one bridge, one bearer token, one daemon (`machine-mcp
connect`, separate process) that reaches the relay through the proxy, so the proxy can cut the
link. Clients reach the relay directly (legacy era: MCP sessions, JSON answers).

Measured:
  restore   ROUNDS times: a `run_process` `sleep 1` call starts, the link is cut 0.3 s in and
            new link connections are refused until 2.5 s in (the result is ready meanwhile and
            held by the daemon); then the proxy lets connections through again. Reported: the
            time from that moment to the daemon socket being ready on the relay (/metrics), and
            to the result reaching the client (the daemon's reconnect backoff is part of both).
  undelivered  ROUNDS times: the daemon is stopped (SIGSTOP), a `read_file` call is sent, and
            the time until its answer is measured (the "not delivered" error, or anything else,
            is reported as seen); then SIGCONT and the link is awaited ready again.
  flapping  for MINUTES: the link is cut every FLAP_EVERY_S and refused for FLAP_DOWN_S, while
            CLIENTS clients loop over `read_file`, `write_file` (a counter file each) and
            `run_process` `echo`. Every call's outcome is counted (result, explicit error, or no
            answer within CALL_TIMEOUT_S); the relay's VmRSS, open fds and pending gauges are read
            before (after a warm-up without faults) and after (quiesced QUIET_S after the end).
"""

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from abuse import _free_port, _relay_with_bridge  # noqa: E402
from common import cell, fmt_ms, kib_field, log, pct, proc_status, status, stop_process  # noqa: E402

ROUNDS = 10
MINUTES = 10.0
FLAP_EVERY_S = 5.0
FLAP_DOWN_S = 1.0
CLIENTS = 4
CALL_TIMEOUT_S = 60.0
QUIET_S = 10.0
WARMUP_S = 20.0
GAUGES = ("machine_mcp_relay_inflight_requests", "machine_mcp_relay_detached_requests", "machine_mcp_relay_streams",
          "machine_mcp_relay_sessions")


class FaultProxy:
    """A TCP proxy on a free loopback port in front of 127.0.0.1:`upstream`. `cut()` closes every
    connection; `refuse(True)` makes new connections close at once."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.lock = threading.Lock()
        self.conns = []
        self.refusing = False
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.sock.accept()
            except OSError:
                return
            if self.refusing:
                a.close()
                continue
            try:
                b = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                a.close()
                continue
            with self.lock:
                self.conns.append((a, b))
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(x, y), daemon=True).start()

    @staticmethod
    def _pump(x, y):
        try:
            while True:
                d = x.recv(65536)
                if not d:
                    break
                y.sendall(d)
        except OSError:
            pass
        for s in (x, y):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for a, b in conns:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass

    def refuse(self, on):
        self.refusing = on


def metrics(mport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rsplit(" ", 1)
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def ready_sockets(mport):
    m = metrics(mport)
    return sum(v for k, v in m.items() if k.startswith("machine_mcp_relay_daemon_sockets") and 'ready' in k)


class Client:
    """One legacy-era MCP session over JSON answers; re-initializes on 404."""

    def __init__(self, url, token):
        self.url, self.token, self.sid, self.n = url, token, None, 0

    def post(self, body, timeout=CALL_TIMEOUT_S):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": f"Bearer {self.token}"}
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=h, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                sid = r.headers.get("Mcp-Session-Id")
                text = r.read().decode()
                ctype = r.headers.get("Content-Type", "")
                status_code = r.status
        except urllib.error.HTTPError as e:
            sid, text, ctype, status_code = None, e.read().decode(), e.headers.get("Content-Type", ""), e.code
        if "event-stream" in ctype:
            msgs = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip()]
            msg = msgs[-1] if msgs else None
        else:
            msg = json.loads(text) if text.strip() else None
        return status_code, sid, msg

    def initialize(self):
        self.sid = None
        st, sid, _ = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench-faults", "version": "0"}}})
        if st != 200 or not sid:
            raise RuntimeError(f"initialize: {st}")
        self.sid = sid
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool, args, timeout=CALL_TIMEOUT_S):
        self.n += 1
        st, _, msg = self.post({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                                "params": {"name": tool, "arguments": args}}, timeout=timeout)
        if st == 404:
            self.initialize()
        return st, msg


def _outcome(st, msg):
    if msg is None:
        return f"HTTP {st}, no message"
    if "error" in msg:
        return "error: " + re.sub(r"\d+", "N", msg["error"].get("message", ""))[:120]
    if msg.get("result", {}).get("isError"):
        text = " ".join(c.get("text", "") for c in msg["result"].get("content", []) if isinstance(c, dict))
        return "tool error: " + re.sub(r"\d+", "N", text)[:120]
    return "ok"


def bench_faults(binary, workdir, minutes=MINUTES, rounds=ROUNDS):
    state = os.path.join(workdir, "relay-state")
    port, mport = _free_port(), _free_port()
    proxy = FaultProxy(port)
    relay_log = open(os.path.join(workdir, "relay.log"), "wb")
    relay = subprocess.Popen(
        [binary, "relay", "serve", "--auth", "token", "--listen", f"127.0.0.1:{port}", "--public-url",
         f"http://127.0.0.1:{proxy.port}", "--metrics-listen", f"127.0.0.1:{mport}", "--state-dir", state,
         "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=relay_log)
    procs = [relay]
    out = {"rounds": rounds, "minutes": minutes}
    try:
        code, token = _relay_with_bridge(binary, relay, mport, state, workdir, "faults")
        ws = os.path.join(workdir, "ws")
        os.makedirs(ws, exist_ok=True)
        with open(os.path.join(ws, "hello.txt"), "w") as f:
            f.write("hello\n")
        daemon = subprocess.Popen(
            [binary, "connect", "--relay", f"http://127.0.0.1:{proxy.port}", "--enroll", code, "--workspace", ws,
             "--state-dir", os.path.join(workdir, "daemon-state"), "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "daemon.log"), "wb"))
        procs.append(daemon)

        def wait_ready(limit=60):
            t = time.monotonic()
            while ready_sockets(mport) < 1:
                if daemon.poll() is not None or time.monotonic() - t > limit:
                    raise RuntimeError(f"daemon not ready; see {workdir}/daemon.log")
                time.sleep(0.02)
            return time.monotonic()

        wait_ready()
        url = f"http://127.0.0.1:{port}/b/faults/mcp"
        c = Client(url, token)
        c.initialize()
        c.call("read_file", {"path": "hello.txt"})

        # restore: link restoration → ready, → first delivered result
        rest = []
        for i in range(rounds):
            got = {}

            def call():
                st, msg = c.call("run_process", {"argv": ["sleep", "1"]})
                got["t"], got["o"] = time.monotonic(), _outcome(st, msg)

            th = threading.Thread(target=call)
            th.start()
            time.sleep(0.3)
            proxy.refuse(True)
            proxy.cut()
            time.sleep(2.2)
            proxy.refuse(False)
            t_restore = time.monotonic()
            t_ready = wait_ready()
            th.join(CALL_TIMEOUT_S + 5)
            rest.append({"ready_ms": (t_ready - t_restore) * 1000,
                         "result_ms": (got["t"] - t_restore) * 1000 if "t" in got else None,
                         "outcome": got.get("o", "no answer")})
            time.sleep(0.5)
        out["restore"] = rest
        log(f"  faults: restore done ({sum(1 for r in rest if r['outcome'] == 'ok')}/{rounds} ok)")

        # undelivered: a frozen daemon
        und = []
        for i in range(rounds):
            os.kill(daemon.pid, signal.SIGSTOP)
            time.sleep(0.2)
            t0 = time.monotonic()
            try:
                st, msg = c.call("read_file", {"path": "hello.txt"}, timeout=300)
                o = _outcome(st, msg)
            except OSError as e:
                o = f"no answer: {e}"
            und.append({"ms": (time.monotonic() - t0) * 1000, "outcome": o})
            os.kill(daemon.pid, signal.SIGCONT)
            wait_ready(300)
            c.call("read_file", {"path": "hello.txt"})
        out["undelivered"] = und
        log(f"  faults: undelivered done (p50 {pct([u['ms'] for u in und], 50):.0f} ms)")

        # flapping soak
        def sample():
            st = proc_status(relay.pid)
            m = metrics(mport)
            return {"rss": kib_field(st, "VmRSS") / 1024, "fds": len(os.listdir(f"/proc/{relay.pid}/fd")),
                    "threads": int(st.get("Threads", "0").split()[0]) if isinstance(st, dict) else 0,
                    **{g: m.get(g, -1) for g in GAUGES}}

        stop = threading.Event()
        counts, lock = {}, threading.Lock()

        def client(k):
            cl = Client(url, token)
            cl.initialize()
            n = 0
            while not stop.is_set():
                n += 1
                for tool, args in (("read_file", {"path": "hello.txt"}),
                                   ("write_file", {"path": f"count-{k}.txt", "content": f"{n}\n"}),
                                   ("run_process", {"argv": ["echo", str(n)]})):
                    try:
                        st, msg = cl.call(tool, args)
                        o = _outcome(st, msg)
                    except socket.timeout:
                        o = "no answer within the client timeout"
                    except OSError as e:
                        o = f"transport: {type(e).__name__}"
                    except RuntimeError as e:
                        o = f"re-initialize failed: {e}"
                        time.sleep(0.5)
                    with lock:
                        counts[(tool, o)] = counts.get((tool, o), 0) + 1

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(WARMUP_S)
        with lock:
            counts.clear()
        out["before"] = sample()
        t_end = time.monotonic() + minutes * 60
        flaps = 0
        while time.monotonic() < t_end:
            time.sleep(FLAP_EVERY_S - FLAP_DOWN_S)
            proxy.refuse(True)
            proxy.cut()
            flaps += 1
            time.sleep(FLAP_DOWN_S)
            proxy.refuse(False)
        stop.set()
        for t in threads:
            t.join(CALL_TIMEOUT_S + 10)
        wait_ready()
        time.sleep(QUIET_S)
        out["after"] = sample()
        out["flaps"] = flaps
        out["counts"] = {f"{t} → {o}": n for (t, o), n in sorted(counts.items())}
        log(f"  faults: flapping done ({flaps} cuts)")
    finally:
        proxy.refuse(True)
        for p in reversed(procs):
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
            stop_process(p)
    return out


def report(res):
    """Summary rows and the details section."""
    rows = []
    und = res.get("undelivered", [])
    if und:
        worst = max(u["ms"] for u in und)
        fast = all(u["outcome"].startswith("error") and "not delivered" in u["outcome"].lower() for u in und)
        rows.append(f"| 9a | frozen daemon (SIGSTOP): a new call's wait for its \"not delivered\" error, max of {len(und)} "
                    f"| {fmt_ms(worst)} ms | — | — | ≤ 5,000 ms, every answer the error | {status(fast and worst <= 5000)} |")
    rest = res.get("restore", [])
    done = [r["result_ms"] for r in rest if r["result_ms"] is not None]
    if rest:
        rows.append(f"| 9b | link restored → first delivered result, p50 of {len(rest)} (reconnect backoff included) "
                    f"| {fmt_ms(pct(done, 50)) if done else '—'} ms | — | — | — (reported) | "
                    f"{status(len(done) == len(rest) and all(r['outcome'] == 'ok' for r in rest))} |")
    if "before" in res:
        b, a = res["before"], res["after"]
        back = all(a[g] == 0 for g in GAUGES[:2])
        rows.append(f"| 9c | relay VmRSS after a {res['minutes']:g}-min flapping soak (quiesced) vs before it "
                    f"| {a['rss']:.1f} MiB | {b['rss']:.1f} MiB | {a['rss'] / b['rss']:.2f}x | ≤ 1.25x, pending gauges 0 "
                    f"| {status(a['rss'] / b['rss'] <= 1.25 and back)} |")
    L = ["## Faults (section 9), details", ""]
    rest = res.get("restore", [])
    if rest:
        ready = [r["ready_ms"] for r in rest]
        done = [r["result_ms"] for r in rest if r["result_ms"] is not None]
        outcomes = {}
        for r in rest:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        L.append(f"Link restoration ({res['rounds']} rounds: a 1 s call, the link cut 0.3 s in and refused for 2.2 s; "
                 "times from the moment the proxy lets connections through again):")
        L.append("")
        L.append("| | p50 | max |")
        L.append("|---|---|---|")
        L.append(f"| daemon socket ready on the relay | {fmt_ms(pct(ready, 50))} ms | {fmt_ms(max(ready))} ms |")
        if done:
            L.append(f"| first delivered result | {fmt_ms(pct(done, 50))} ms | {fmt_ms(max(done))} ms |")
        L.append("")
        L.append("Outcomes: " + ", ".join(f"{n}× {cell(k)}" for k, n in outcomes.items()))
        L.append("")
    und = res.get("undelivered", [])
    if und:
        ms_ = [u["ms"] for u in und]
        outcomes = {}
        for u in und:
            outcomes[u["outcome"]] = outcomes.get(u["outcome"], 0) + 1
        L.append(f"Frozen daemon (SIGSTOP; {len(und)} rounds): a new `read_file` call waited p50 {fmt_ms(pct(ms_, 50))} ms, "
                 f"max {fmt_ms(max(ms_))} ms for its answer. Answers: " + ", ".join(f"{n}× {cell(k)}" for k, n in outcomes.items()))
        L.append("")
    if "before" in res:
        b, a = res["before"], res["after"]
        L.append(f"Flapping soak: {res['minutes']:g} min, the link cut every {FLAP_EVERY_S:g} s and refused for "
                 f"{FLAP_DOWN_S:g} s ({res['flaps']} cuts), {CLIENTS} clients looping over read_file, write_file and "
                 "run_process `echo`:")
        L.append("")
        L.append("| relay | before (after a warm-up) | after (quiesced) |")
        L.append("|---|---|---|")
        L.append(f"| VmRSS | {b['rss']:.1f} MiB | {a['rss']:.1f} MiB |")
        L.append(f"| open fds | {b['fds']} | {a['fds']} |")
        for g in GAUGES:
            L.append(f"| `{g}` | {b[g]:.0f} | {a[g]:.0f} |")
        L.append("")
        L.append("Call outcomes during the soak:")
        L.append("")
        for k, n in res["counts"].items():
            L.append(f"- {cell(k)}: {n}")
        L.append("")
    return rows, L


def main():
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--minutes", type=float, default=MINUTES)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--out")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-bench-faults-") as d:
        res = bench_faults(a.bin, d, a.minutes, a.rounds)
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump(res, f)
    rows, det = report(res)
    text = "\n".join(rows + [""] + det) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
