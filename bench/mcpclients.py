"""MCP clients shared by the soak and abuse sections (Python 3 stdlib only).

- `StdioMux`: one `machine-mcp stdio` server driven by several threads at once over its one pair
  of pipes (requests tagged with distinct ids, a reader thread hands each response to the thread
  waiting for it), as a host that runs calls concurrently does.
- `HttpSession`: one MCP session over Streamable HTTP in the legacy era (`initialize` +
  `Mcp-Session-Id`, protocol 2025-11-25) on one keep-alive connection; JSON and SSE responses.
"""

import http.client
import json
import socket
import subprocess
import threading
import time
import urllib.parse

from common import ID_HEAD, ID_TAIL, PROTOCOL, init_request


class CallError(Exception):
    """A call that did not succeed; `kind` is a short, stable label for counting."""

    def __init__(self, kind, detail=""):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def check_result(tool, msg):
    """Raises CallError for a JSON-RPC error or a tool result with isError."""
    if "error" in msg:
        e = msg["error"]
        raise CallError(f"{tool}: JSON-RPC error {e.get('code')}", str(e.get("message", ""))[:200])
    res = msg.get("result", {})
    if res.get("isError"):
        text = ""
        for c in res.get("content", []):
            if c.get("type") == "text":
                text = c.get("text", "")
                break
        raise CallError(f"{tool}: isError", text[:200])
    return res


class StdioMux:
    """One stdio server shared by many threads. `request` may be called from any thread."""

    def __init__(self, argv, env=None, stderr=subprocess.DEVNULL):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                  bufsize=1 << 20, env=env)
        self.lock = threading.Lock()
        self.next_id = 1
        self.pending = {}
        self.closed = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        msg = self.request("initialize", init_request()["params"])[1]
        assert "result" in msg, msg
        self.notify("notifications/initialized")

    @property
    def pid(self):
        return self.p.pid

    def _read(self):
        for line in self.p.stdout:
            m = ID_HEAD.match(line) or ID_TAIL.search(line, max(0, len(line) - 64))
            rid = int(m.group(1)) if m else None
            if rid is None:
                if b'"method"' in line[:200] and b'"id"' not in line[:200]:
                    continue  # a notification
                try:
                    rid = json.loads(line).get("id")
                except ValueError:
                    continue
            with self.lock:
                slot = self.pending.pop(rid, None)
            if slot is not None:
                slot[1] = (time.perf_counter_ns(), line)
                slot[0].set()
        self.closed = "server closed stdout"
        with self.lock:
            waiting = list(self.pending.values())
            self.pending.clear()
        for slot in waiting:
            slot[0].set()

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        with self.lock:
            self.p.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
            self.p.stdin.flush()

    def request(self, method, params=None, timeout=180):
        """Returns (ns from write to the response line, decoded response)."""
        if self.closed:
            raise CallError("transport: server gone", self.closed)
        slot = [threading.Event(), None]
        with self.lock:
            rid = self.next_id
            self.next_id += 1
            msg = {"jsonrpc": "2.0", "id": rid, "method": method}
            if params is not None:
                msg["params"] = params
            self.pending[rid] = slot
            t0 = time.perf_counter_ns()
            try:
                self.p.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
                self.p.stdin.flush()
            except OSError as e:
                self.pending.pop(rid, None)
                raise CallError("transport: write failed", str(e))
        if not slot[0].wait(timeout):
            with self.lock:
                self.pending.pop(rid, None)
            raise CallError("transport: no response (timeout)", f"{method} after {timeout} s")
        if slot[1] is None:
            raise CallError("transport: server gone", self.closed or "")
        t1, line = slot[1]
        return t1 - t0, json.loads(line)

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def parse_sse(body):
    """The JSON messages in an SSE body (data lines of each event joined)."""
    out = []
    data = []
    for raw in body.split(b"\n"):
        line = raw.rstrip(b"\r")
        if not line:
            if data:
                try:
                    out.append(json.loads(b"\n".join(data)))
                except ValueError:
                    pass
                data = []
            continue
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
    if data:
        try:
            out.append(json.loads(b"\n".join(data)))
        except ValueError:
            pass
    return out


class HttpSession:
    """One MCP session (legacy era) over one keep-alive HTTP/1.1 connection."""

    def __init__(self, url, token=None, timeout=180):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path
        self.token = token
        self.timeout = timeout
        self.conn = None
        self.sid = None
        self.next_id = 1
        self.reconnects = 0

    def _connect(self):
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _headers(self, extra=None):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": PROTOCOL}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
        if extra:
            h.update(extra)
        return h

    def _roundtrip(self, method, body, headers):
        """(status, headers dict lowercased, body bytes); one reconnect if the kept-alive
        connection was closed by the server."""
        for attempt in (0, 1):
            if self.conn is None:
                try:
                    self._connect()
                except OSError as e:
                    self.conn = None
                    raise CallError("transport: connect " + type(e).__name__, str(e))
            try:
                self.conn.request(method, self.path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
                hdrs = {k.lower(): v for k, v in r.getheaders()}
                if hdrs.get("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, hdrs, data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.BadStatusLine) as e:
                self.conn.close()
                self.conn = None
                self.reconnects += 1
                if attempt:
                    raise CallError("transport: connection closed", str(e))
            except OSError as e:  # timeouts, refused
                if self.conn:
                    self.conn.close()
                self.conn = None
                raise CallError("transport: " + type(e).__name__, str(e))
        raise AssertionError("unreachable")

    def request(self, method, params=None):
        """Returns (ns, decoded response message)."""
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        body = json.dumps(msg, separators=(",", ":")).encode()
        t0 = time.perf_counter_ns()
        status, hdrs, data = self._roundtrip("POST", body, self._headers())
        t1 = time.perf_counter_ns()
        if status != 200:
            raise CallError(f"{method}: HTTP {status}", data[:200].decode(errors="replace"))
        if hdrs.get("content-type", "").startswith("text/event-stream"):
            for m in parse_sse(data):
                if m.get("id") == rid:
                    return t1 - t0, m
            raise CallError(f"{method}: no response in the SSE stream", data[:200].decode(errors="replace"))
        m = json.loads(data)
        if m.get("id") != rid:
            raise CallError(f"{method}: response id mismatch", data[:200].decode(errors="replace"))
        if method == "initialize" and "mcp-session-id" in hdrs:
            self.sid = hdrs["mcp-session-id"]
        return t1 - t0, m

    def open(self, client_info=None):
        self.sid = None
        params = init_request()["params"]
        if client_info is not None:
            params["clientInfo"] = client_info
        rid = self.next_id
        self.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params},
                          separators=(",", ":")).encode()
        t0 = time.perf_counter_ns()
        status, hdrs, data = self._roundtrip("POST", body, self._headers())
        t1 = time.perf_counter_ns()
        if status != 200:
            raise CallError(f"initialize: HTTP {status}", data[:200].decode(errors="replace"))
        self.sid = hdrs.get("mcp-session-id")
        if not self.sid:
            raise CallError("initialize: no Mcp-Session-Id", "")
        status, _, data = self._roundtrip(
            "POST", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), self._headers())
        if status not in (200, 202):
            raise CallError(f"notifications/initialized: HTTP {status}", data[:200].decode(errors="replace"))
        return t1 - t0

    def delete(self):
        if self.sid:
            try:
                self._roundtrip("DELETE", None, self._headers())
            except CallError:
                pass
            self.sid = None

    def close(self):
        self.delete()
        if self.conn:
            self.conn.close()
            self.conn = None
