"""Benchmark section 8 (`--only abuse`, issue 12): the relay under abuse, while a legitimate
client pings through it. Not part of the default run, and not a test: it reports what happens.

Setup: `machine-mcp relay serve --auth token --listen 127.0.0.1:P --metrics-listen 127.0.0.1:M`
(its own state dir), one bridge (`relay bridge add abuse`), one bearer token (`relay token create
--bridge abuse`), one daemon (`machine-mcp connect --enroll CODE`, a separate process, so the
relay's figures are the relay's alone). /metrics is read on the separate metrics listener, which
has its own connection table, so sampling works while the main listener is at its cap.

Three kinds of process, so that the attackers' Python work does not run on the legitimate
client's interpreter:
- this orchestrator: starts everything, samples the relay (VmRSS, VmHWM, threads, open fds, the
  /metrics gauges) and the daemon every SAMPLE_S, runs the phases, writes the report;
- the legitimate client (`abuse.py legit`): one MCP session (legacy era, bearer token) on one
  keep-alive connection, `ping` every LEGIT_INTERVAL_S (a new session, `DELETE` + `initialize`,
  every LEGIT_SESSION_PINGS pings); and every FRESH_INTERVAL_S a fresh TCP connection that does
  `initialize` + `ping` + `DELETE` (what a client that reconnects meets). Every result is logged
  with its CLOCK_MONOTONIC start, so the orchestrator cuts the series by phase;
- the attacker of each phase (`abuse.py attack KIND`), asyncio over raw sockets (stdlib), which
  prints a JSON summary of what it saw.

Phases (each with a quiet window before and after; the legitimate client's latency is reported
for the window before, during and after each):
  idle       10,000 TCP connections opened at once (512 connects in flight) that send nothing,
             held for IDLE_HOLD_S; for each: connect error, closed by the relay at once (< 1 s),
             closed later (when), or still open at the end;
  slow-body  200 unauthenticated POSTs to the bridge's MCP URL whose headers announce a
             1,000,000-byte body, then 1 body byte per second: when the status line arrives, which
             status, when the relay closes the connection;
  slow-auth  the same with the legitimate bearer token (a token holder or a leaked token; bodies
             of authenticated requests are read within 30 s);
  slow-head  200 requests whose header lines arrive 1 byte per second (headers must arrive within
             10 s);
  ws-ping    200 clients that open daemon sockets (`GET /daemon/v1/connect` WebSocket upgrades)
             and never send a hello, only a masked WebSocket ping every second; each closed or
             refused socket is opened again after 0.2 s, for WS_DURATION_S: 101 vs 503 counts,
             the most upgraded at once, and how long an upgraded socket lived;
  ws-big     64 daemon sockets that each send one 4 MiB WebSocket message before any hello (at most
             1 MiB may be sent before the hello is verified): how soon the relay closes them;
  init-8mb   1,000 `initialize` requests of 8,000,000 bytes each (a `clientInfo.name` of ~8 MB, a
             valid JSON body under the 8 MiB body limit) with the legitimate token, from 4
             connections; the sessions are left open, then deleted (`DELETE`), and the relay's RSS
             is sampled throughout. Stopped early if the relay's RSS passes INIT_RSS_ABORT_MIB or the
             machine's MemAvailable falls under INIT_MEMAVAIL_MIN_MIB (reported);
  init-wide  INIT_WIDE_N `initialize` requests of 8 MB whose `capabilities` are ~800,000 small
             members (the parsed form of such a body is much larger than its text): relay RSS per
             session.
  big-bodies BIG_N POSTs with the legitimate token, each announcing an 8 MiB-minus-one body and
             sending all of it but the last byte, then held for BIG_HOLD_S (one credential holding
             many large bodies): which statuses come back (past the relay's body budget, 429 or
             503 with `Retry-After` before the body is read), relay RSS during (target <
             RSS_BOUND_MIB) and BIG_AFTER_S after the connections closed (target < BIG_AFTER_MIB
             above the baseline). A body the budget admits is spilled, as it arrives, past 256 KiB
             to an anonymous file in the relay's spill directory (STATE/relay/spill): the row
             reports the relay's count of spilled bodies (since it started).

All connections come from 127.0.0.1. The relay exempts loopback peers from its per-address caps
(a reverse proxy on the same host is loopback), so here only the totals apply: 4,096 client
connections (`--max-connections`) and 64 unverified daemon sockets; the per-address caps (128
connections, 8 unverified sockets) are not exercised by this benchmark.
"""

import argparse
import asyncio
import base64
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import cell, fmt_ms, kib_field, log, pct, proc_status, status, stop_process  # noqa: E402

SAMPLE_S = 0.5
LEGIT_INTERVAL_S = 0.02
LEGIT_SESSION_PINGS = 200
FRESH_INTERVAL_S = 0.5
QUIET_S = 10.0
IDLE_N = 10_000
IDLE_HOLD_S = 15.0
SLOW_N = 200
SLOW_BODY_S = 40.0
SLOW_HEAD_S = 20.0
WS_N = 200
WS_DURATION_S = 30.0
WS_BIG_N = 64
WS_BIG_BYTES = 4 << 20
INIT_N = 1000
INIT_BYTES = 8_000_000
INIT_CONNS = 4
INIT_WIDE_N = 10
INIT_RSS_ABORT_MIB = 12 * 1024
INIT_MEMAVAIL_MIN_MIB = 6 * 1024
INIT_HOLD_S = 25.0
P99_TARGET_MS = 50.0
# Where the attackers connect (environment ABUSE_ATTACK_HOST). 127.0.0.1 (the default): every
# attacker is a loopback peer, which the relay counts only against its totals. A non-loopback
# address of this host (e.g. the eth0 address): the relay listens on 0.0.0.0 (its public URL
# stays http://127.0.0.1:P), the attackers' connections come from that address and meet the
# per-address caps, while the legitimate client and the daemon stay on 127.0.0.1.
ATTACK_HOST = os.environ.get("ABUSE_ATTACK_HOST", "127.0.0.1")
RSS_BOUND_MIB = 256
BIG_N = 128
BIG_BYTES = 8 * 1024 * 1024 - 1
BIG_HOLD_S = 15.0
BIG_AFTER_S = 30.0
BIG_AFTER_MIB = 64


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def mem_available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return None


def machine_busy_s():
    """CPU-seconds all CPUs spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# =============================================================================================
# the legitimate client (a process of its own)


def legit_main(a):
    from mcpclients import CallError, HttpSession

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = open(a.out, "w", buffering=1 << 16)
    lock = threading.Lock()

    def rec(kind, t, ns=None, err=None):
        with lock:
            out.write(json.dumps({"k": kind, "t": t, "ms": ns / 1e6 if ns is not None else None, "e": err}) + "\n")

    def keepalive():
        hs = HttpSession(a.url, a.token, timeout=30)
        n = 0
        while not stop.is_set():
            t = time.monotonic()
            try:
                if hs.sid is None or n % LEGIT_SESSION_PINGS == 0:
                    hs.delete()
                    ns = hs.open()
                    rec("init", t, ns)
                    t = time.monotonic()
                ns, msg = hs.request("ping")
                if "error" in msg:
                    raise CallError("ping: JSON-RPC error", str(msg["error"])[:100])
                rec("ping", t, ns)
            except CallError as e:
                rec("ping", t, None, e.kind)
                hs.sid = None
                time.sleep(0.05)
            n += 1
            time.sleep(max(0.0, LEGIT_INTERVAL_S - (time.monotonic() - t)))
        hs.close()

    def fresh():
        while not stop.is_set():
            t = time.monotonic()
            hs = HttpSession(a.url, a.token, timeout=30)
            try:
                hs.open()
                ns, msg = hs.request("ping")
                if "error" in msg:
                    raise CallError("ping: JSON-RPC error", str(msg["error"])[:100])
                hs.close()  # DELETE, then the connection closed: part of the timed sequence
                rec("fresh", t, int((time.monotonic() - t) * 1e9))
            except CallError as e:
                rec("fresh", t, None, e.kind)
            finally:
                try:
                    hs.close()
                except Exception:  # noqa: BLE001
                    pass
            stop.wait(max(0.0, FRESH_INTERVAL_S - (time.monotonic() - t)))

    th = [threading.Thread(target=keepalive), threading.Thread(target=fresh)]
    for t in th:
        t.start()
    print("ready", flush=True)
    for t in th:
        t.join()
    out.close()


# =============================================================================================
# attackers (asyncio, raw sockets)


class Counter:
    def __init__(self):
        self.now = 0
        self.max = 0
        self.series = []

    def inc(self):
        self.now += 1
        self.max = max(self.max, self.now)

    def dec(self):
        self.now -= 1


async def _sampler(counter, t0, every=0.5):
    while True:
        counter.series.append((round(time.monotonic() - t0, 2), counter.now))
        await asyncio.sleep(every)


def _buckets(lives, edges):
    out = {}
    for lo, hi, name in edges:
        out[name] = sum(1 for x in lives if lo <= x < hi)
    return out


async def attack_idle(a):
    t0 = time.monotonic()
    end = t0 + a.hold
    sem = asyncio.Semaphore(512)
    open_c = Counter()
    res = {"connect_errors": {}, "lives": [], "open_at_end": 0, "connected": 0}
    samp = asyncio.ensure_future(_sampler(open_c, t0))
    writers = []

    async def slot(i):
        async with sem:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(ATTACK_HOST, a.port), 15)
            except (OSError, asyncio.TimeoutError) as e:
                k = type(e).__name__ + (f" errno {e.errno}" if getattr(e, "errno", None) else "")
                res["connect_errors"][k] = res["connect_errors"].get(k, 0) + 1
                return
        tc = time.monotonic()
        res["connected"] += 1
        open_c.inc()
        writers.append(w)
        try:
            left = end - time.monotonic()
            data = await asyncio.wait_for(r.read(1), timeout=max(0.01, left))
            res["lives"].append(time.monotonic() - tc)
            if data:
                res.setdefault("got_bytes", 0)
                res["got_bytes"] += 1
        except asyncio.TimeoutError:
            res["open_at_end"] += 1
        except OSError as e:
            res["lives"].append(time.monotonic() - tc)
            res.setdefault("reset", 0)
            res["reset"] += 1
        finally:
            open_c.dec()

    await asyncio.gather(*(slot(i) for i in range(a.n)))
    samp.cancel()
    for w in writers:
        w.close()
    lives = res.pop("lives")
    res["closed"] = len(lives)
    res["closed_buckets"] = _buckets(lives, [(0, 1, "< 1 s"), (1, 9, "1–9 s"), (9, 12, "9–12 s"), (12, 1e9, "≥ 12 s")])
    res["close_times_s"] = sorted(round(x, 2) for x in lives if x >= 1)[:: max(1, len(lives) // 50)] if lives else []
    res["max_open"] = open_c.max
    res["open_series"] = open_c.series
    res["elapsed_s"] = time.monotonic() - t0
    return res


def _http_head(kind, port, token, path):
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
             "Accept: application/json, text/event-stream", "MCP-Protocol-Version: 2025-11-25",
             "Content-Length: 1000000"]
    if kind == "slow-auth":
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def attack_slow(a):
    """slow-body / slow-auth / slow-head: each connection trickles one byte per second."""
    t0 = time.monotonic()
    end = t0 + a.duration
    res = {"status": {}, "t_status": [], "t_closed": [], "open_at_end": 0, "connect_errors": 0,
           "write_error_t": [], "bytes_sent": []}
    open_c = Counter()
    samp = asyncio.ensure_future(_sampler(open_c, t0))

    async def one(i):
        try:
            r, w = await asyncio.open_connection(ATTACK_HOST, a.port)
        except OSError:
            res["connect_errors"] += 1
            return
        tc = time.monotonic()
        open_c.inc()
        head = _http_head(a.kind, a.port, a.token, a.path)
        if a.kind == "slow-head":
            first, rest = head[:10], head[10:]  # "POST /b/ab" then one byte per second
        else:
            first, rest = head, b"{" + b" " * 999_999
        sent = 0
        closed = asyncio.Event()

        async def reader():
            buf = b""
            got_status = False
            try:
                while True:
                    chunk = await r.read(65536)
                    if not chunk:
                        break
                    buf += chunk
                    if not got_status and b"\r\n" in buf:
                        got_status = True
                        line = buf.split(b"\r\n", 1)[0].decode(errors="replace")
                        m = re.match(r"HTTP/1\.\d (\d{3})", line)
                        code = m.group(1) if m else line[:20]
                        res["status"][code] = res["status"].get(code, 0) + 1
                        res["t_status"].append(time.monotonic() - tc)
            except OSError:
                pass
            if not got_status:
                res["status"]["none (closed without a response)"] = res["status"].get("none (closed without a response)", 0) + 1
            res["t_closed"].append(time.monotonic() - tc)
            closed.set()

        rt = asyncio.ensure_future(reader())
        try:
            w.write(first)
            await w.drain()
            sent += len(first)
            for b in rest:
                if closed.is_set() or time.monotonic() >= end:
                    break
                try:
                    await asyncio.wait_for(closed.wait(), 1.0)
                    break
                except asyncio.TimeoutError:
                    pass
                w.write(bytes([b]))
                await w.drain()
                sent += 1
        except OSError:
            res["write_error_t"].append(time.monotonic() - tc)
        try:
            await asyncio.wait_for(closed.wait(), max(0.01, end - time.monotonic()))
        except asyncio.TimeoutError:
            res["open_at_end"] += 1
            rt.cancel()
        res["bytes_sent"].append(sent)
        open_c.dec()
        w.close()

    await asyncio.gather(*(one(i) for i in range(a.n)))
    samp.cancel()
    for k in ("t_status", "t_closed", "write_error_t", "bytes_sent"):
        v = sorted(res[k])
        res[k] = {"n": len(v), "min": v[0], "p50": v[len(v) // 2], "max": v[-1]} if v else {"n": 0}
    res["max_open"] = open_c.max
    res["open_series"] = open_c.series
    return res


async def attack_big_bodies(a):
    """big-bodies: each connection sends a token-authenticated POST announcing an 8 MiB-minus-one
    body, all of it but the last byte, and holds the connection for `hold` seconds."""
    res = {"status": {}, "retry_after": 0, "held": 0, "connect_errors": 0, "write_errors": 0}
    body = b" " * (a.bytes - 1)

    async def one(i):
        try:
            r, w = await asyncio.open_connection(ATTACK_HOST, a.port)
        except OSError:
            res["connect_errors"] += 1
            return
        head = (f"POST {a.path} HTTP/1.1\r\nHost: 127.0.0.1:{a.port}\r\nAuthorization: Bearer {a.token}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {a.bytes}\r\n\r\n").encode()

        async def reader():
            try:
                return await r.read(4096)
            except OSError:
                return b""

        rt = asyncio.ensure_future(reader())
        try:
            w.write(head + body)
            await asyncio.wait_for(w.drain(), a.hold)
        except (OSError, asyncio.TimeoutError):
            res["write_errors"] += 1
        try:
            got = await asyncio.wait_for(asyncio.shield(rt), a.hold)
        except asyncio.TimeoutError:
            got = None
        if got:
            line = got.split(b"\r\n", 1)[0].decode(errors="replace")
            m = re.match(r"HTTP/1\.\d (\d{3})", line)
            code = m.group(1) if m else line[:20]
            res["status"][code] = res["status"].get(code, 0) + 1
            if b"retry-after:" in got.lower():
                res["retry_after"] += 1
        elif got is None:
            res["held"] += 1
        else:
            res["status"]["none (closed without a response)"] = res["status"].get("none (closed without a response)", 0) + 1
        rt.cancel()
        w.close()

    await asyncio.gather(*(one(i) for i in range(a.n)))
    return res


def _ws_frame(opcode, payload, fin=True, length=None):
    mask = os.urandom(4)
    n = len(payload) if length is None else length
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = bytes([b0, 0x80 | n])
    elif n < 65536:
        head = bytes([b0, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([b0, 0x80 | 127]) + n.to_bytes(8, "big")
    masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + mask + masked


def _ws_upgrade(port):
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET /daemon/v1/connect HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()


async def _ws_open(port):
    r, w = await asyncio.open_connection(ATTACK_HOST, port)
    w.write(_ws_upgrade(port))
    await w.drain()
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await asyncio.wait_for(r.read(4096), 15)
        if not chunk:
            break
        head += chunk
    line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    m = re.match(r"HTTP/1\.\d (\d{3})", line)
    return r, w, (m.group(1) if m else "none"), head.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in head else b""


async def attack_ws_ping(a):
    t0 = time.monotonic()
    end = t0 + a.duration
    res = {"status": {}, "lives": [], "open_at_end": 0, "connect_errors": 0, "bytes_from_relay": 0,
           "pings_sent": 0}
    up = Counter()
    samp = asyncio.ensure_future(_sampler(up, t0))
    ping = _ws_frame(0x9, b"ping")

    async def slot(i):
        while time.monotonic() < end:
            try:
                r, w, code, rest = await _ws_open(a.port)
            except (OSError, asyncio.TimeoutError):
                res["connect_errors"] += 1
                await asyncio.sleep(0.2)
                continue
            res["status"][code] = res["status"].get(code, 0) + 1
            if code != "101":
                w.close()
                await asyncio.sleep(0.2)
                continue
            tu = time.monotonic()
            up.inc()
            res["bytes_from_relay"] += len(rest)
            closed = asyncio.Event()

            async def reader():
                try:
                    while True:
                        chunk = await r.read(65536)
                        if not chunk:
                            break
                        res["bytes_from_relay"] += len(chunk)
                except OSError:
                    pass
                closed.set()

            rt = asyncio.ensure_future(reader())
            ended = False
            while not closed.is_set():
                if time.monotonic() >= end:
                    ended = True
                    break
                try:
                    w.write(ping)
                    await w.drain()
                    res["pings_sent"] += 1
                except OSError:
                    break
                try:
                    await asyncio.wait_for(closed.wait(), min(1.0, max(0.01, end - time.monotonic())))
                except asyncio.TimeoutError:
                    pass
            if ended and not closed.is_set():
                res["open_at_end"] += 1
                res.setdefault("open_at_end_ages", []).append(round(time.monotonic() - tu, 2))
                rt.cancel()
            else:
                res["lives"].append(time.monotonic() - tu)
            up.dec()
            w.close()
            await asyncio.sleep(0.2)

    await asyncio.gather(*(slot(i) for i in range(a.n)))
    samp.cancel()
    lives = sorted(res.pop("lives"))
    res["upgraded_and_closed"] = len(lives)
    res["life"] = {"min": lives[0], "p50": lives[len(lives) // 2], "max": lives[-1]} if lives else {}
    res["max_upgraded"] = up.max
    res["upgraded_series"] = up.series
    return res


async def attack_ws_big(a):
    t0 = time.monotonic()
    res = {"status": {}, "t_closed": [], "sent": [], "open_at_end": 0}
    payload = b"x" * 65536

    async def one(i):
        try:
            r, w, code, _ = await _ws_open(a.port)
        except (OSError, asyncio.TimeoutError):
            res["status"]["connect error"] = res["status"].get("connect error", 0) + 1
            return
        res["status"][code] = res["status"].get(code, 0) + 1
        if code != "101":
            w.close()
            return
        tu = time.monotonic()
        closed = asyncio.Event()

        async def reader():
            try:
                while await r.read(65536):
                    pass
            except OSError:
                pass
            closed.set()

        rt = asyncio.ensure_future(reader())
        sent = 0

        async def send():
            nonlocal sent
            # one text message of WS_BIG_BYTES, masked with a zero key (valid: any key is)
            w.write(bytes([0x81, 0x80 | 127]) + WS_BIG_BYTES.to_bytes(8, "big") + b"\0\0\0\0")
            while sent < WS_BIG_BYTES and not closed.is_set():
                w.write(payload)
                await w.drain()  # blocks once the relay stops reading
                sent += len(payload)

        try:
            await asyncio.wait_for(send(), max(0.01, t0 + a.duration - time.monotonic()))
        except (OSError, asyncio.TimeoutError):
            pass
        try:
            await asyncio.wait_for(closed.wait(), max(0.01, t0 + a.duration - time.monotonic()))
            res["t_closed"].append(time.monotonic() - tu)
        except asyncio.TimeoutError:
            res["open_at_end"] += 1
            rt.cancel()
        res["sent"].append(sent)
        w.close()

    await asyncio.gather(*(one(i) for i in range(a.n)))
    for k in ("t_closed", "sent"):
        v = sorted(res[k])
        res[k] = {"n": len(v), "min": v[0], "p50": v[len(v) // 2], "max": v[-1]} if v else {"n": 0}
    return res


def attack_init(a):
    """Blocking threads: a.conns keep-alive connections, a.n initializes of a.bytes each."""
    import http.client

    if a.kind == "init-wide":
        # capabilities: {"x0":0,"x1":0,...} filling a.bytes
        head = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"wide","version":"1"},"capabilities":{'
        parts, size, i = [], len(head) + 3, 0
        while size < a.bytes:
            p = f'"x{i}":0'.encode()
            parts.append(p)
            size += len(p) + 1
            i += 1
        body = head + b",".join(parts) + b"}}}"
    else:
        head = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"version":"1","name":"'
        tail = b'"}}}'
        body = head + b"a" * (a.bytes - len(head) - len(tail)) + tail
    json.loads(body)  # valid JSON
    lock = threading.Lock()
    state = {"next": 0, "status": {}, "lat": [], "sids": [], "errors": {}, "stopped": None}
    t0 = time.monotonic()

    def worker():
        conn = None
        while True:
            with lock:
                if state["next"] >= a.n or state["stopped"]:
                    break
                if a.stop_file and os.path.exists(a.stop_file):
                    state["stopped"] = open(a.stop_file).read().strip() or "stop file"
                    break
                state["next"] += 1
            t = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(ATTACK_HOST, a.port, timeout=60)
                conn.request("POST", a.path, body=body, headers={
                    "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {a.token}"})
                r = conn.getresponse()
                r.read()
                sid = r.getheader("Mcp-Session-Id")
                with lock:
                    state["status"][str(r.status)] = state["status"].get(str(r.status), 0) + 1
                    state["lat"].append(time.monotonic() - t)
                    if sid:
                        state["sids"].append(sid)
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    k = type(e).__name__
                    state["errors"][k] = state["errors"].get(k, 0) + 1
                if conn:
                    conn.close()
                conn = None
        if conn:
            conn.close()

    th = [threading.Thread(target=worker) for _ in range(a.conns)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    lat = sorted(state["lat"])
    return {"sent": state["next"], "status": state["status"], "errors": state["errors"],
            "stopped": state["stopped"], "elapsed_s": time.monotonic() - t0, "body_bytes": len(body),
            "lat_s": {"p50": lat[len(lat) // 2], "max": lat[-1]} if lat else {}, "sids": state["sids"]}


def delete_sessions(port, path, token, sids):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    codes = {}
    for sid in sids:
        try:
            conn.request("DELETE", path, headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": sid,
                                                  "MCP-Protocol-Version": "2025-11-25"})
            r = conn.getresponse()
            r.read()
            codes[str(r.status)] = codes.get(str(r.status), 0) + 1
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            codes["error"] = codes.get("error", 0) + 1
    conn.close()
    return codes


def attack_main(a):
    nofile = raise_nofile()
    if a.kind == "idle":
        res = asyncio.run(attack_idle(a))
    elif a.kind in ("slow-body", "slow-auth", "slow-head"):
        res = asyncio.run(attack_slow(a))
    elif a.kind == "ws-ping":
        res = asyncio.run(attack_ws_ping(a))
    elif a.kind == "ws-big":
        res = asyncio.run(attack_ws_big(a))
    elif a.kind in ("init-8mb", "init-wide"):
        res = attack_init(a)
    elif a.kind == "big-bodies":
        res = asyncio.run(attack_big_bodies(a))
    else:
        raise SystemExit(f"unknown attack {a.kind}")
    res["nofile"] = nofile
    sys.stdout.write(json.dumps(res) + "\n")


# =============================================================================================
# the orchestrator


class Sampler(threading.Thread):
    def __init__(self, relay_pid, daemon_pid, metrics_port):
        super().__init__(daemon=True)
        self.relay_pid, self.daemon_pid, self.metrics_port = relay_pid, daemon_pid, metrics_port
        self.samples = []
        self.stop = threading.Event()
        self.watch = None  # callable(sample) run after each sample (the init abort)

    def one(self):
        t = time.monotonic()
        s = {"t": t}
        try:
            st = proc_status(self.relay_pid)
            s.update(rss=kib_field(st, "VmRSS"), hwm=kib_field(st, "VmHWM"), threads=int(st["Threads"]))
            s["fds"] = len(os.listdir(f"/proc/{self.relay_pid}/fd"))
        except (OSError, KeyError):
            s["relay_gone"] = True
        try:
            s["daemon_rss"] = kib_field(proc_status(self.daemon_pid), "VmRSS")
        except (OSError, KeyError):
            s["daemon_gone"] = True
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                text = r.read().decode()
            for key, name in (("conns", "machine_mcp_relay_connections"),
                              ("refused", "machine_mcp_relay_connections_refused_total"),
                              ("ws_refused", "machine_mcp_relay_daemon_sockets_refused_total"),
                              ("sessions", "machine_mcp_relay_sessions"),
                              ("spilled", "machine_mcp_relay_request_bodies_spilled_total"),
                              ("body_mem", "machine_mcp_relay_request_body_bytes_in_memory")):
                m = re.search(rf"^{name} (\S+)$", text, re.M)
                if m:
                    s[key] = float(m.group(1))
            m = re.findall(r'^machine_mcp_relay_daemon_sockets\{state="(\w+)"\} (\S+)$', text, re.M)
            s["sockets"] = {k: float(v) for k, v in m}
        except OSError:
            s["metrics_error"] = True
        s["memavail"] = mem_available_mib()
        s["load1"] = os.getloadavg()[0]
        s["busy"] = machine_busy_s()
        try:
            s["cpu"] = cpu_s(self.relay_pid)
        except OSError:
            pass
        return s

    def run(self):
        while not self.stop.is_set():
            s = self.one()
            self.samples.append(s)
            if self.watch:
                self.watch(s)
            self.stop.wait(SAMPLE_S)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, check=True)


def _relay_with_bridge(binary, relay, mport, state, workdir, bridge):
    """Waits up to 30 s for the relay process `relay` to answer /healthz on its metrics port
    `mport`, then adds `bridge` to its store `state` and creates a token for it. Returns the
    enrollment code and the token; raises RuntimeError when the relay exits or does not answer in
    time, or the CLI prints no token."""
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz", timeout=2).read()
            break
        except OSError:
            if relay.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"relay did not start (exit {relay.poll()}); see {workdir}/relay.log")
            time.sleep(0.1)
    r = _run(binary, "relay", "bridge", "add", bridge, "--state-dir", state, "--log-level", "warn")
    code = re.search(r"mbe_[A-Za-z0-9_\-]+", r.stdout + r.stderr).group(0)
    r = _run(binary, "relay", "token", "create", "--bridge", bridge, "--state-dir", state, "--log-level", "warn")
    m = re.search(r"mbt_[A-Za-z0-9_\-]+", r.stdout)
    if not m:
        raise RuntimeError(f"token create: no token in {r.stdout!r}")
    return code, m.group(0)


def bench_abuse(binary, workdir, quick=False, only=None):
    """Returns everything the report needs."""
    global IDLE_N, IDLE_HOLD_S, SLOW_N, SLOW_BODY_S, SLOW_HEAD_S, WS_N, WS_DURATION_S, INIT_N, QUIET_S
    if quick:
        IDLE_N, IDLE_HOLD_S, SLOW_N, SLOW_BODY_S, SLOW_HEAD_S = 2000, 12.0, 50, 35.0, 13.0
        WS_N, WS_DURATION_S, INIT_N, QUIET_S = 100, 15.0, 20, 4.0
    nofile = raise_nofile()
    state = os.path.join(workdir, "relay-state")
    port, mport = _free_port(), _free_port()
    url = f"http://127.0.0.1:{port}"
    relay_log = open(os.path.join(workdir, "relay.log"), "wb")
    loopback = ATTACK_HOST.startswith("127.") or ATTACK_HOST in ("::1", "localhost")
    listen = [f"127.0.0.1:{port}"] if loopback else [f"0.0.0.0:{port}", "--public-url", url]
    relay = subprocess.Popen(
        [binary, "relay", "serve", "--auth", "token", "--listen", *listen, "--metrics-listen",
         f"127.0.0.1:{mport}", "--state-dir", state, "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=relay_log)
    procs = [relay]
    out = {"nofile": nofile, "phases": [], "limits": {"max_connections": 4096}, "attack_host": ATTACK_HOST,
           "listen": listen[0]}
    sampler = None
    legit = None
    try:
        code, token = _relay_with_bridge(binary, relay, mport, state, workdir, "abuse")
        ws = os.path.join(workdir, "ws")
        os.makedirs(ws, exist_ok=True)
        daemon = subprocess.Popen(
            [binary, "connect", "--relay", url, "--enroll", code, "--workspace", ws, "--state-dir",
             os.path.join(workdir, "daemon-state"), "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "daemon.log"), "wb"))
        procs.append(daemon)
        sampler = Sampler(relay.pid, daemon.pid, mport)
        deadline = time.monotonic() + 60
        while sampler.one().get("sockets", {}).get("ready", 0) < 1:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon not ready (exit {daemon.poll()}); see {workdir}/daemon.log")
            time.sleep(0.2)
        mcp = f"{url}/b/abuse/mcp"
        path = "/b/abuse/mcp"
        out["empty"] = sampler.one()
        sampler.start()
        legit_out = os.path.join(workdir, "legit.jsonl")
        legit = subprocess.Popen([sys.executable, os.path.abspath(__file__), "legit", "--url", mcp, "--token", token,
                                  "--out", legit_out], stdout=subprocess.PIPE, stderr=open(os.path.join(workdir, "legit.err"), "wb"))
        procs.append(legit)
        if legit.stdout.readline().strip() != b"ready":
            raise RuntimeError("the legitimate client did not start")
        time.sleep(QUIET_S)

        def attack(kind, **kw):
            argv = [sys.executable, os.path.abspath(__file__), "attack", kind, "--port", str(port), "--path", path,
                    "--token", token]
            for k, v in kw.items():
                argv += [f"--{k.replace('_', '-')}", str(v)]
            t0 = time.monotonic()
            log(f"  abuse: {kind} ...")
            p = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
            t1 = time.monotonic()
            if p.returncode != 0:
                raise RuntimeError(f"attacker {kind} failed: {p.stderr[-2000:]}")
            res = json.loads(p.stdout.strip().splitlines()[-1])
            return t0, t1, res

        def phase(name, kind, settle=QUIET_S, **kw):
            if only and name not in only:
                return None
            t0, t1, res = attack(kind, **kw)
            ph = {"name": name, "kind": kind, "t0": t0, "t1": t1, "res": res, "n": kw.get("n")}
            time.sleep(settle)
            ph["t_after"] = time.monotonic()
            out["phases"].append(ph)
            log(f"    {name}: {json.dumps({k: v for k, v in res.items() if not k.endswith('series')})[:600]}")
            return ph

        phase("idle", "idle", n=IDLE_N, hold=IDLE_HOLD_S)
        phase("slow-body", "slow-body", n=SLOW_N, duration=SLOW_BODY_S)
        phase("slow-auth", "slow-auth", n=SLOW_N, duration=SLOW_BODY_S)
        phase("slow-head", "slow-head", n=SLOW_N, duration=SLOW_HEAD_S)
        phase("ws-ping", "ws-ping", n=WS_N, duration=WS_DURATION_S)
        phase("ws-big", "ws-big", n=WS_BIG_N, duration=15)

        big = phase("big-bodies", "big-bodies", settle=BIG_AFTER_S, n=BIG_N, hold=BIG_HOLD_S, bytes=BIG_BYTES)
        if big is not None:
            big["after"] = sampler.one()

        for name, n in (("init-8mb", INIT_N), ("init-wide", INIT_WIDE_N)):
            if only and name not in only:
                continue
            stop_file = os.path.join(workdir, f"{name}.stop")

            def watch(s, stop_file=stop_file):
                if os.path.exists(stop_file):
                    return
                why = None
                if s.get("rss", 0) > INIT_RSS_ABORT_MIB * 1024:
                    why = f"relay RSS {s['rss'] // 1024} MiB > {INIT_RSS_ABORT_MIB} MiB"
                elif s.get("memavail") is not None and s["memavail"] < INIT_MEMAVAIL_MIN_MIB:
                    why = f"MemAvailable {s['memavail']} MiB < {INIT_MEMAVAIL_MIN_MIB} MiB"
                if why:
                    with open(stop_file, "w") as f:
                        f.write(why)

            sampler.watch = watch
            t0, t1, res = attack(name, n=n, bytes=INIT_BYTES, stop_file=stop_file, conns=INIT_CONNS)
            sampler.watch = None
            sids = res.pop("sids")
            res["sessions_opened"] = len(sids)
            ph = {"name": name, "kind": name, "t0": t0, "t1": t1, "res": res, "n": n}
            time.sleep(INIT_HOLD_S)
            ph["held"] = sampler.one()
            td = time.monotonic()
            res["delete_status"] = delete_sessions(port, path, token, sids)
            ph["t_deleted"] = time.monotonic()
            res["delete_s"] = ph["t_deleted"] - td
            time.sleep(INIT_HOLD_S)
            ph["after_delete"] = sampler.one()
            ph["t_after"] = time.monotonic()
            out["phases"].append(ph)
            log(f"    {name}: {json.dumps(res)[:600]}")
        time.sleep(QUIET_S)
        out["end"] = sampler.one()
    finally:
        if sampler:
            sampler.stop.set()
        if legit and legit.poll() is None:
            legit.terminate()
            try:
                legit.wait(timeout=20)
            except subprocess.TimeoutExpired:
                legit.kill()
        for p in reversed(procs[:2]):
            stop_process(p, timeout=10)
        out["relay_exit"] = relay.returncode
    out["samples"] = sampler.samples if sampler else []
    out["legit"] = []
    try:
        with open(os.path.join(workdir, "legit.jsonl")) as f:
            out["legit"] = [json.loads(line) for line in f if line.strip()]
    except OSError:
        pass
    return out


# =============================================================================================
# report


def _lat(rows, kind, t0, t1):
    sel = [r for r in rows if r["k"] == kind and t0 <= r["t"] < t1]
    ok = [r["ms"] for r in sel if r["ms"] is not None]
    errs = {}
    for r in sel:
        if r["ms"] is None:
            errs[r["e"]] = errs.get(r["e"], 0) + 1
    return {"n": len(sel), "ok": len(ok), "p50": pct(ok, 50) if ok else None, "p99": pct(ok, 99) if ok else None,
            "max": max(ok) if ok else None, "errors": errs}


def _fmt_lat(d):
    if not d["n"]:
        return "—"
    s = f"{fmt_ms(d['p50'])} / {fmt_ms(d['p99'])} ms" if d["ok"] else "no success"
    if d["errors"]:
        s += f" ({sum(d['errors'].values())} of {d['n']} failed: " + ", ".join(f"{n}× {cell(k)}" for k, n in d["errors"].items()) + ")"
    else:
        s += f" (n={d['n']})"
    return s


def _window(samples, t0, t1):
    sel = [s for s in samples if t0 <= s["t"] < t1 and "rss" in s]
    if not sel:
        return {}
    dt = sel[-1]["t"] - sel[0]["t"]
    cpu = {}
    if dt > 0 and "cpu" in sel[0] and "cpu" in sel[-1]:
        cpu = {"relay_cpu_pct": 100 * (sel[-1]["cpu"] - sel[0]["cpu"]) / dt,
               "busy_pct": 100 * (sel[-1]["busy"] - sel[0]["busy"]) / dt}
    return {**cpu, "load1_max": max(s.get("load1", 0) for s in sel),
            "rss_max": max(s["rss"] for s in sel) / 1024, "rss_last": sel[-1]["rss"] / 1024,
            "hwm_last": sel[-1]["hwm"] / 1024,
            "fds_max": max(s["fds"] for s in sel), "conns_max": max((s.get("conns", 0) for s in sel), default=0),
            "threads_max": max(s["threads"] for s in sel), "daemon_rss_max": max(s.get("daemon_rss", 0) for s in sel) / 1024,
            "sessions_max": max((s.get("sessions", 0) for s in sel), default=0)}


PHASE_LABELS = {
    "idle": "{n} idle TCP connections at once (nothing sent), held {hold:.0f} s",
    "slow-body": "{n} unauthenticated POSTs announcing a 1 MB body, 1 byte/s",
    "slow-auth": "{n} POSTs with the valid token announcing a 1 MB body, 1 byte/s",
    "slow-head": "{n} requests whose headers arrive 1 byte/s",
    "ws-ping": "{n} clients holding unverified daemon sockets that only send WebSocket pings (re-opened when closed), {d:.0f} s",
    "ws-big": "{n} unverified daemon sockets each sending a 4 MiB message before any hello",
    "init-8mb": "{n} `initialize` of 8 MB (`clientInfo.name` ~8 MB) with the valid token, {c} connections, sessions (if any) kept 25 s, then deleted",
    "init-wide": "{n} `initialize` of 8 MB (`capabilities` of ~800,000 small members), {c} connections, sessions (if any) kept 25 s, then deleted",
    "big-bodies": "{n} POSTs with the valid token, each holding an 8 MiB-minus-one body but its last byte",
}


def report(res):
    rows, det = [], []
    legit, samples = res["legit"], res["samples"]
    base = res["empty"]["rss"] / 1024
    all_t0 = samples[0]["t"] if samples else 0
    det.append("## Abuse, details")
    det.append("")
    det.append(
        f"`machine-mcp relay serve --auth token --listen {res['listen']}` (default caps: 4,096 connections in all, 128 per non-loopback "
        f"address; loopback peers count only against the total); the attackers connect to {res['attack_host']}"
        f"{' (loopback: only the totals apply to them)' if res['attack_host'].startswith('127.') else ' (not loopback: the per-address caps apply to them)'}, "
        f"the legitimate client and the daemon to 127.0.0.1; one daemon (`machine-mcp connect`, separate process), "
        f"relay VmRSS with the daemon connected and no client: {base:.1f} MiB. Legitimate client (its own process): "
        f"`ping` every {LEGIT_INTERVAL_S * 1000:.0f} ms on one keep-alive connection and MCP session (a new session every "
        f"{LEGIT_SESSION_PINGS} pings), and every {FRESH_INTERVAL_S} s a fresh connection doing `initialize` + `ping` + "
        f"`DELETE` (\"fresh\", timed as a whole). Windows: before = the {QUIET_S:.0f} s before the attack, during = the "
        f"attacker's run, after = the {QUIET_S:.0f} s after it. Relay sampled every {SAMPLE_S} s. Attacker and client "
        f"processes share the 2 CPUs with the relay and the daemon. Open-file limit of the attacker: {res['nofile'][0]}."
    )
    det.append("")
    det.append("| attack | legit `ping` p50 / p99: before | during | after | fresh connection (`initialize`+`ping`+`DELETE`) during | relay VmRSS max during (after); VmHWM at the end | relay open fds max | relay connections max (/metrics) | CPU during: relay / whole machine (of 200 %); 1-min load max |")
    det.append("|---|---|---|---|---|---|---|---|---|")
    worst_p99, worst_rss = 0.0, 0.0
    for ph in res["phases"]:
        r = ph["res"]
        t_end = ph.get("t_after", ph["t1"])
        before = _lat(legit, "ping", ph["t0"] - QUIET_S, ph["t0"])
        during = _lat(legit, "ping", ph["t0"], ph["t1"])
        after = _lat(legit, "ping", ph["t1"], t_end)
        fresh = _lat(legit, "fresh", ph["t0"], ph["t1"])
        # at least one sample in "during" (an attack can be shorter than SAMPLE_S); for the
        # initializes the window runs to the end of the phase (sessions held, then deleted)
        w_end = t_end if ph["name"] in ("init-8mb", "init-wide") else max(ph["t1"], ph["t0"] + SAMPLE_S) + SAMPLE_S
        w = _window(samples, ph["t0"], w_end)
        wc = _window(samples, ph["t0"], max(ph["t1"], ph["t0"] + SAMPLE_S) + SAMPLE_S)  # the attack itself
        wa = _window(samples, ph["t1"], t_end)
        if during["p99"] is not None:
            worst_p99 = max(worst_p99, during["p99"])
        label = PHASE_LABELS[ph["name"]].format(n=f"{ph['n']:,}", hold=IDLE_HOLD_S, d=WS_DURATION_S, c=INIT_CONNS)
        ph["label"] = label
        ph["stats"] = (before, during, after, fresh, w, wa)
        if ph["name"] not in ("init-8mb", "init-wide"):
            worst_rss = max(worst_rss, w.get("rss_max", 0))
        det.append(
            f"| {ph['name']} | {_fmt_lat(before)} | {_fmt_lat(during)} | {_fmt_lat(after)} | {_fmt_lat(fresh)} "
            f"| {w.get('rss_max', 0):.1f} MiB ({wa.get('rss_last', 0):.1f} MiB); {w.get('hwm_last', 0):.0f} MiB | {w.get('fds_max', '—')} | {w.get('conns_max', 0):.0f} "
            f"| {wc.get('relay_cpu_pct', 0):.0f} % / {wc.get('busy_pct', 0):.0f} %; {wc.get('load1_max', 0):.1f} |"
        )
    det.append("")
    # per attack
    for ph in res["phases"]:
        r = ph["res"]
        det.append(f"### {ph['name']}: what the attacker saw")
        det.append("")
        det.append("```json")
        det.append(json.dumps({k: v for k, v in r.items() if not k.endswith("series")}, indent=None)[:3000])
        det.append("```")
        det.append("")
        if ph["name"] in ("init-8mb", "init-wide"):
            w = ph["stats"][4]
            held, dele = ph.get("held", {}), ph.get("after_delete", {})
            n = r.get("sessions_opened", 0)
            per = ((held.get("rss", 0) / 1024) - base) / n if n else 0
            det.append(
                f"Relay VmRSS: max {w.get('rss_max', 0):.0f} MiB over the phase (sending, holding, deleting); {held.get('rss', 0) / 1024:.0f} MiB "
                f"{INIT_HOLD_S:.0f} s after the last initialize with {n} sessions open ({per:.1f} MiB per session above the "
                f"{base:.1f} MiB baseline); {dele.get('rss', 0) / 1024:.0f} MiB {INIT_HOLD_S:.0f} s after the sessions were "
                f"deleted. Daemon VmRSS max {w.get('daemon_rss_max', 0):.0f} MiB. Sessions in /metrics: max "
                f"{w.get('sessions_max', 0):.0f}."
            )
            det.append("")
    # the curve: relay RSS and fds over time (every ~5 s)
    det.append("### Relay over time")
    det.append("")
    det.append("| t (s) | phase | VmRSS | open fds | connections | daemon sockets candidate / ready (/metrics) | sessions | daemon VmRSS |")
    det.append("|---|---|---|---|---|---|---|---|")
    step = max(1, int(5 / SAMPLE_S))
    for i, s in enumerate(samples):
        if i % step and not (i + 1 < len(samples) and _phase_at(res, samples[i + 1]["t"]) != _phase_at(res, s["t"])):
            continue
        if "rss" not in s:
            det.append(f"| {s['t'] - all_t0:.1f} | {_phase_at(res, s['t'])} | relay gone | | | | | |")
            continue
        so = s.get("sockets", {})
        det.append(
            f"| {s['t'] - all_t0:.1f} | {_phase_at(res, s['t'])} | {s['rss'] / 1024:.1f} MiB | {s['fds']} | {s.get('conns', 0):.0f} "
            f"| {so.get('candidate', 0):.0f} / {so.get('ready', 0):.0f} | {s.get('sessions', 0):.0f} "
            f"| {s.get('daemon_rss', 0) / 1024:.1f} MiB |"
        )
    det.append("")
    # summary rows
    non_init = [ph for ph in res["phases"] if ph["name"] not in ("init-8mb", "init-wide")]
    if non_init:
        p99s = ", ".join(f"{ph['name']} {fmt_ms(ph['stats'][1]['p99'])}" for ph in non_init if ph["stats"][1]["p99"] is not None)
        errs = sum(sum(ph["stats"][1]["errors"].values()) for ph in non_init)
        rows.append(
            f"| 8 | relay under abuse (idle connections, slow bodies and headers, unverified daemon sockets): legitimate "
            f"`ping` p99 during each attack (ms) | worst {fmt_ms(max(ph['stats'][1]['p99'] or 0 for ph in non_init))} ms "
            f"({p99s}); {errs} failed pings | same client before each attack: "
            f"{', '.join(fmt_ms(ph['stats'][0]['p99']) for ph in non_init if ph['stats'][0]['p99'] is not None)} ms | — "
            f"| p99 < {P99_TARGET_MS:.0f} ms | {status(all((ph['stats'][1]['p99'] or 1e9) < P99_TARGET_MS for ph in non_init) and errs == 0)} |"
        )
        rows.append(
            f"| 8 | relay VmRSS max during those attacks | {worst_rss:.1f} MiB | relay with its daemon, no client: {base:.1f} MiB "
            f"| — | < {RSS_BOUND_MIB} MiB | {status(worst_rss < RSS_BOUND_MIB)} |"
        )
    for ph in res["phases"]:
        if ph["name"] not in ("init-8mb", "init-wide"):
            continue
        r, (before, during, after, fresh, w, wa) = ph["res"], ph["stats"]
        held = ph.get("held", {})
        n = r.get("sessions_opened", 0)
        rows.append(
            f"| 8 | {ph['label']} ({r['sent']} sent): relay VmRSS | max {w.get('rss_max', 0):.0f} MiB; "
            f"{held.get('rss', 0) / 1024:.0f} MiB with the {n} sessions open; {ph.get('after_delete', {}).get('rss', 0) / 1024:.0f} MiB after "
            f"`DELETE`{'; stopped early: ' + r['stopped'] if r.get('stopped') else ''} | baseline {base:.1f} MiB "
            f"| legit `ping` p99 during: {fmt_ms(during['p99']) if during['p99'] else '—'} ms | < {RSS_BOUND_MIB} MiB; p99 < {P99_TARGET_MS:.0f} ms "
            f"| {status(w.get('rss_max', 1e9) < RSS_BOUND_MIB and (during['p99'] or 1e9) < P99_TARGET_MS)} |"
        )
    for ph in res["phases"]:
        if ph["name"] != "big-bodies":
            continue
        r, w = ph["res"], ph["stats"][4]
        after = ph.get("after", {}).get("rss", 0) / 1024
        spilled = ph.get("after", {}).get("spilled")
        ok = w.get("rss_max", 1e9) < RSS_BOUND_MIB and after - base < BIG_AFTER_MIB
        rows.append(
            f"| 8 | {ph['label']}: relay VmRSS during; {BIG_AFTER_S:.0f} s after | max {w.get('rss_max', 0):.0f} MiB; "
            f"{after:.0f} MiB ({after - base:+.0f} MiB); statuses {r.get('status')}, {r.get('retry_after', 0)} with Retry-After, "
            f"{r.get('held', 0)} held, {'?' if spilled is None else f'{spilled:.0f}'} bodies spilled to disk so far "
            f"| baseline {base:.1f} MiB | — | < {RSS_BOUND_MIB} MiB; < {BIG_AFTER_MIB} MiB above baseline after "
            f"| {status(ok)} |"
        )
    rows_top = rows
    return rows_top, det


def _phase_at(res, t):
    for ph in res["phases"]:
        if ph["t0"] <= t < ph["t1"]:
            return ph["name"]
        if ph["t1"] <= t < ph.get("t_after", ph["t1"]):
            return f"after {ph['name']}"
    return "quiet"


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("legit")
    lg.add_argument("--url", required=True)
    lg.add_argument("--token", required=True)
    lg.add_argument("--out", required=True)
    at = sub.add_parser("attack")
    at.add_argument("kind")
    at.add_argument("--port", type=int, required=True)
    at.add_argument("--path", required=True)
    at.add_argument("--token", default="")
    at.add_argument("--n", type=int, default=100)
    at.add_argument("--hold", type=float, default=15)
    at.add_argument("--duration", type=float, default=30)
    at.add_argument("--bytes", type=int, default=INIT_BYTES)
    at.add_argument("--stop-file", default="")
    at.add_argument("--conns", type=int, default=INIT_CONNS)
    a = ap.parse_args()
    if a.cmd == "legit":
        legit_main(a)
    else:
        attack_main(a)


if __name__ == "__main__":
    main()
