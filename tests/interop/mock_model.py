#!/usr/bin/env python3
"""A mock model endpoint on loopback for driving real MCP hosts headless (no model is reachable):
it speaks the three model APIs the hosts use, records the tool declarations each run sends, and
makes the host perform one real MCP tool call.

  Anthropic Messages   POST .../v1/messages (SSE when `stream`)          Claude Code
                       (ANTHROPIC_BASE_URL)
  Gemini               POST .../v1beta/models/M:streamGenerateContent    Gemini CLI
                       (SSE) and :generateContent, :countTokens
                       (GOOGLE_GEMINI_BASE_URL)
  OpenAI Responses     POST .../v1/responses (SSE when `stream`)         Codex CLI
                       (a model provider's base_url)

Every path may start with `/run/LABEL` (LABEL: letters, digits, `-`, `_`): a base URL of
`http://127.0.0.1:PORT/run/LABEL` keeps one host run's records apart from the others'.

The script, per run: a request whose tool declarations include the MCP server's `read_file` (a
declared tool whose name ends with `read_file` and contains the server's name, `machine` unless
`--server` says otherwise; hosts prefix MCP tools with it) is answered with a call of that tool
on the marker file (`--marker-file`), once; once a tool result comes back, with plain text, and
the run records whether the result holds the marker (`--marker`). Any other request (titles,
summaries, routing or next-speaker checks of the host) gets short plain text: the JSON object
`{"reasoning": ..., "next_speaker": "user", "model_choice": "flash", "complexity_reasoning": ...,
"complexity_score": 1}`, which also satisfies the hosts that expect JSON from such a call (Gemini
CLI's model routing and next-speaker checks).

What a run recorded (`MockModel.record(label)`, or `GET /records` for all runs as JSON): the tool
names of every request that declared tools, whether the call was made (with the tool name) and
whether the result came back with the marker, and each request's API and path. Requests are
also appended to a JSON-lines log (`--log`), bodies cut to 64 KiB.

  python3 mock_model.py [--port P] [--marker-file F] [--marker M] [--server NAME] [--log FILE]

prints `mock model listening on http://127.0.0.1:PORT` and serves until interrupted.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RUN_PREFIX = re.compile(r"^/run/([A-Za-z0-9_-]+)(/.*)$")
UTILITY_TEXT = json.dumps({"reasoning": "mock model", "next_speaker": "user", "model_choice": "flash",
                           "complexity_reasoning": "mock model", "complexity_score": 1})
FINAL_TEXT = "The mock model read the file."
LOG_BODY_MAX = 64 << 10


class Run:
    """What one host run did (by label)."""

    def __init__(self) -> None:
        self.tools: list[list[str]] = []  # tool names of each request that declared tools
        self.called: str | None = None  # the tool the mock asked the host to call
        self.result_seen = False  # a tool result came back
        self.marker_seen = False  # ... and it held the marker
        self.result_text = ""  # what came back, cut (for failure reports)
        self.requests: list[str] = []  # "api path" of every request

    def as_json(self) -> dict[str, Any]:
        return {"tools": self.tools, "called": self.called, "result_seen": self.result_seen,
                "marker_seen": self.marker_seen, "result_text": self.result_text[:2000],
                "requests": self.requests}


def _tools(tools: Any, namespace: str | None = None) -> list[tuple[str, str | None, str]]:
    """Every tool in a tools array of any of the three APIs, as (display name, namespace, name):
    Gemini nests declarations in `functionDeclarations`; a Responses `namespace` (Codex groups
    each MCP server's tools in one) nests them in `tools`, and its tools are shown as
    `NAMESPACE__NAME`."""
    out: list[tuple[str, str | None, str]] = []
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace" and isinstance(t.get("name"), str):
            out.extend(_tools(t.get("tools"), t["name"]))
            continue
        for nested in ("functionDeclarations", "function_declarations"):
            out.extend(_tools(t.get(nested), namespace))
        fn = t.get("function") if isinstance(t.get("function"), dict) else None
        name = t.get("name") or (fn or {}).get("name")
        if isinstance(name, str):
            shown = name if namespace is None else f"{namespace.rstrip('_')}__{name}"
            out.append((shown, namespace, name))
    return out


def _names(tools: Any) -> list[str]:
    return [shown for shown, _, _ in _tools(tools)]


def _texts(value: Any) -> list[str]:
    """Every string inside `value` (a tool result of any shape)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _texts(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _texts(v)]
    return []


class MockModel:
    """The mock endpoint: `start()` serves it on a free loopback port (a daemon thread)."""

    def __init__(self, marker_file: str, marker: str, server: str = "machine", log: Path | None = None) -> None:
        self.marker_file = marker_file
        self.marker = marker
        self.server = server
        self.log = log
        self.lock = threading.Lock()
        self.runs: dict[str, Run] = {}
        self.httpd: ThreadingHTTPServer | None = None

    # -- state

    def record(self, label: str) -> dict[str, Any]:
        with self.lock:
            return self._run(label).as_json()

    def _run(self, label: str) -> Run:
        return self.runs.setdefault(label, Run())

    def _ours(self, names: list[str]) -> str | None:
        """The MCP server's read_file among declared tool names."""
        for n in names:
            if n.endswith("read_file") and self.server in n:
                return n
        return None

    def decide(self, label: str, api: str, path: str, names: list[str], results: list[Any]) -> tuple[str, Any]:
        """("call", (tool name, arguments)) or ("text", text) for one request."""
        with self.lock:
            run = self._run(label)
            run.requests.append(f"{api} {path}")
            if names:
                run.tools.append(names)
            if results and run.called:
                text = "\n".join(_texts(results))
                run.result_seen = True
                run.marker_seen = run.marker_seen or self.marker in text
                run.result_text = run.result_text or text
                return "text", FINAL_TEXT
            ours = self._ours(names)
            if ours and not run.called:
                run.called = ours
                return "call", (ours, {"path": self.marker_file})
            return "text", FINAL_TEXT if ours else UTILITY_TEXT

    # -- serving

    def start(self, port: int = 0) -> int:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/").endswith("/records"):
                    with model.lock:
                        body = json.dumps({k: r.as_json() for k, r in model.runs.items()}).encode()
                    self._send(200, "application/json", body)
                else:
                    # model listings and health probes: an empty list is enough for every host
                    self._send(200, "application/json", b'{"data": [], "models": []}')

            def do_HEAD(self) -> None:  # noqa: N802
                self._send(200, "application/json", b"")

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                m = RUN_PREFIX.match(self.path)
                label, path = (m.group(1), m.group(2)) if m else ("default", self.path)
                model._log(label, self.command, path, raw)
                route = path.split("?", 1)[0]
                try:
                    if route.endswith("/messages/count_tokens"):
                        self._send(200, "application/json", b'{"input_tokens": 1}')
                    elif route.endswith("/messages"):
                        self._anthropic(label, route, body)
                    elif ":countTokens" in route:
                        self._send(200, "application/json", b'{"totalTokens": 1}')
                    elif ":streamGenerateContent" in route or ":generateContent" in route:
                        self._gemini(label, route, body, ":streamGenerateContent" in route)
                    elif route.endswith("/responses"):
                        self._responses(label, route, body)
                    else:
                        self._send(404, "application/json", b'{"error": {"message": "not mocked"}}')
                except (BrokenPipeError, ConnectionResetError):
                    pass

            # -- helpers

            def _send(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _sse(self, events: list[tuple[str | None, Any]]) -> None:
                """Writes `events` ((event name or None, data)) as one SSE body and closes."""
                out = []
                for name, data in events:
                    if name:
                        out.append(f"event: {name}\n")
                    out.append(f"data: {json.dumps(data)}\n\n")
                body = "".join(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            # -- Anthropic Messages

            def _anthropic(self, label: str, route: str, body: dict[str, Any]) -> None:
                results = []
                msgs = body.get("messages") or []
                last = msgs[-1] if msgs else {}
                if last.get("role") == "user" and isinstance(last.get("content"), list):
                    results = [c.get("content") for c in last["content"]
                               if isinstance(c, dict) and c.get("type") == "tool_result"]
                kind, what = model.decide(label, "anthropic", route, _names(body.get("tools")), results)
                mid, m = f"msg_{uuid.uuid4().hex[:12]}", body.get("model", "mock")
                usage = {"input_tokens": 1, "output_tokens": 1}
                if kind == "call":
                    name, args = what
                    block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": name, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
                    full = dict(block, input=args)
                    stop = "tool_use"
                else:
                    block = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": what}
                    full = {"type": "text", "text": what}
                    stop = "end_turn"
                if not body.get("stream"):
                    self._send(200, "application/json", json.dumps({
                        "id": mid, "type": "message", "role": "assistant", "model": m, "content": [full],
                        "stop_reason": stop, "stop_sequence": None, "usage": usage}).encode())
                    return
                self._sse([
                    ("message_start", {"type": "message_start", "message": {
                        "id": mid, "type": "message", "role": "assistant", "model": m, "content": [],
                        "stop_reason": None, "stop_sequence": None, "usage": usage}}),
                    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": 1}}),
                    ("message_stop", {"type": "message_stop"}),
                ])

            # -- Gemini

            def _gemini(self, label: str, route: str, body: dict[str, Any], stream: bool) -> None:
                contents = body.get("contents") or []
                last = contents[-1] if contents else {}
                results = [p["functionResponse"] for p in last.get("parts") or []
                           if isinstance(p, dict) and "functionResponse" in p]
                kind, what = model.decide(label, "gemini", route, _names(body.get("tools")), results)
                if kind == "call":
                    name, args = what
                    part = {"functionCall": {"name": name, "args": args}}
                else:
                    part = {"text": what}
                chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
                                         "index": 0}],
                         "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
                         "modelVersion": route.split("/models/", 1)[-1].split(":", 1)[0]}
                if stream:
                    self._sse([(None, chunk)])
                else:
                    self._send(200, "application/json", json.dumps(chunk).encode())

            # -- OpenAI Responses

            def _responses(self, label: str, route: str, body: dict[str, Any]) -> None:
                items = body.get("input") if isinstance(body.get("input"), list) else []
                results = [i.get("output") for i in items
                           if isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output")]
                declared = _tools(body.get("tools"))
                kind, what = model.decide(label, "responses", route, [d for d, _, _ in declared], results)
                rid = f"resp_{uuid.uuid4().hex[:12]}"
                if kind == "call":
                    shown, args = what
                    _, namespace, name = next(t for t in declared if t[0] == shown)
                    item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}", "status": "completed",
                            "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": name, "arguments": json.dumps(args)}
                    if namespace is not None:
                        # a namespaced call names its namespace apart (Responses API)
                        item["namespace"] = namespace
                else:
                    item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant",
                            "status": "completed", "content": [{"type": "output_text", "text": what, "annotations": []}]}
                usage = {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
                         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 2}
                response = {"id": rid, "object": "response", "status": "completed", "model": body.get("model", "mock"),
                            "output": [item], "usage": usage}
                if not body.get("stream"):
                    self._send(200, "application/json", json.dumps(response).encode())
                    return
                self._sse([
                    ("response.created", {"type": "response.created",
                                          "response": dict(response, status="in_progress", output=[])}),
                    ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                    "item": item}),
                    ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                   "item": item}),
                    ("response.completed", {"type": "response.completed", "response": response}),
                ])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, name="mock-model", daemon=True).start()
        return self.httpd.server_address[1]

    def stop(self) -> None:
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()

    def _log(self, label: str, method: str, path: str, raw: bytes) -> None:
        if not self.log:
            return
        entry = {"t": round(time.time(), 3), "run": label, "method": method, "path": path,
                 "body": raw[:LOG_BODY_MAX].decode("utf-8", "replace")}
        with self.lock, open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--marker-file", default="marker.txt")
    ap.add_argument("--marker", default="MOCK-MODEL-MARKER")
    ap.add_argument("--server", default="machine")
    ap.add_argument("--log", type=Path)
    a = ap.parse_args()
    m = MockModel(a.marker_file, a.marker, a.server, a.log)
    port = m.start(a.port)
    print(f"mock model listening on http://127.0.0.1:{port}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
