#!/usr/bin/env bash
# A real host: Claude Code's CLI (`@anthropic-ai/claude-code`, pinned in package.json) health-checks
# `machine-mcp stdio` and `machine-mcp up` over Streamable HTTP with `claude mcp list`, and on the
# wire its first request, `server/discover` (MCP 2026-07-28, server/discover.mdx), must be answered
# with a result, so that it never falls back to `initialize` (2025-11-25). Issue 9, "What must be
# shown", second bullet; ../shared/INTEROP.md §6.
#
#   tests/interop/claude-code.sh WORK BIN
#
# WORK: the interop work dir (its tree/ is the workspace; logs go to WORK/logs, scratch files to
# WORK/claude-code); BIN: the machine-mcp binary. Environment: INTEROP_NODE_MODULES (the
# node_modules of tests/interop/package-lock.json, with @anthropic-ai/claude-code), INTEROP_PY (a
# Python >= 3.11; the stdio wire is recorded by tee, the HTTP wire by a logging proxy in Python).
#
# Claude Code runs with HOME pointed at a scratch dir (its config, ~/.claude.json, starts empty),
# from a scratch project dir (`claude mcp add` writes the servers into that project's local
# scope), with telemetry, error reporting and the auto-updater off. `claude mcp list` needs no
# model and no API key: it connects to each server, probes it and prints `✔ Connected` or
# `✗ Failed to connect`.
#
# Prints `PASS claude-code …` / `FAIL claude-code …: why` lines (details indented after a FAIL),
# as the other interop groups do; exits non-zero if a check failed.
set -uo pipefail

WORK="$1"
BIN="$2"
MODULES="${INTEROP_NODE_MODULES:?INTEROP_NODE_MODULES is not set}"
PY="${INTEROP_PY:-python3}"
CLAUDE_VERSION=2.1.328 # must match tests/interop/package.json
LIST_SECS=120          # `claude mcp list` health-checks both servers (each has its own timeout)
UP_READY_SECS=60       # how long `up` may take to print its JSON line

D="$WORK/claude-code"
LOGS="$WORK/logs"
mkdir -p "$D/home" "$D/project" "$LOGS"
failures=0 up_pid="" proxy_pid=""

cleanup() {
  if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null; wait "$proxy_pid" 2>/dev/null; fi
  if [ -n "$up_pid" ]; then
    kill -INT "$up_pid" 2>/dev/null
    wait "$up_pid" 2>/dev/null
  fi
}
trap cleanup EXIT

pass() { echo "PASS claude-code $*"; }
fail() { # fail MESSAGE [FILE...]: a FAIL line, then the files' last 40 lines, indented
  local msg="$1" f
  shift
  echo "FAIL claude-code $msg"
  for f in "$@"; do
    [ -f "$f" ] || continue
    echo "    --- $(basename "$f")"
    tail -n 40 "$f" | sed 's/^/    | /'
  done
  failures=$((failures + 1))
}
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

CLAUDE="$MODULES/@anthropic-ai/claude-code/bin/claude.exe"
# claude SECS ARGS...: run the CLI (for at most SECS) in the scratch project with the scratch HOME
# and no network side traffic
claude() {
  local secs="$1"
  shift
  (cd "$D/project" && timeout "$secs" env HOME="$D/home" XDG_CONFIG_HOME="$D/home/.config" \
    DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "$CLAUDE" "$@")
}

version="$(claude 60 --version 2>&1 | head -n 1)"
if [[ "$version" != "$CLAUDE_VERSION "* ]]; then
  fail "setup: $CLAUDE --version printed '$version', want $CLAUDE_VERSION"
  exit 1
fi

# ---------------------------------------------------------------------------------------------
# the stdio server, its wire recorded: what Claude Code writes (stdin) and what we answer (stdout)

STDIO_IN="$LOGS/claude-stdio-in.jsonl"
STDIO_OUT="$LOGS/claude-stdio-out.jsonl"
: >"$STDIO_IN"
: >"$STDIO_OUT"
cat >"$D/stdio-tee.sh" <<EOF
#!/bin/sh
# machine-mcp stdio with both directions of its wire appended to two files
tee -a '$STDIO_IN' | '$BIN' "\$@" 2>>'$LOGS/claude-stdio-server.stderr' | tee -a '$STDIO_OUT'
EOF
chmod +x "$D/stdio-tee.sh"

# ---------------------------------------------------------------------------------------------
# `up` (relay and daemon in one process), reached through a logging proxy

HTTP_WIRE="$LOGS/claude-http-wire.jsonl"
: >"$HTTP_WIRE"
up_json="$LOGS/up-claude.json"
up_log="$LOGS/up-claude.log"
up_port="$(free_port)"
: >"$up_json"
timeout -k 15 600 "$BIN" up --listen "127.0.0.1:$up_port" --state-dir "$D/state" --json \
  --workspace "$WORK/tree" --profile review >"$up_json" 2>"$up_log" &
up_pid=$!
for ((i = 0; i < UP_READY_SECS * 10; i++)); do
  [[ "$(head -n 1 "$up_json")" == "{"*"}" ]] && break
  kill -0 "$up_pid" 2>/dev/null || break
  sleep 0.1
done
if ! [[ "$(head -n 1 "$up_json")" == "{"*"}" ]]; then
  fail "setup: up printed no JSON line within ${UP_READY_SECS}s" "$up_log"
  exit 1
fi
read -r mcp_url token < <("$PY" -c 'import json, sys; j = json.loads(open(sys.argv[1]).readline()); print(j["mcp_url"], j["token"])' "$up_json")

proxy_port="$(free_port)"
"$PY" - "$proxy_port" "$up_port" "$HTTP_WIRE" >"$LOGS/claude-http-proxy.log" 2>&1 <<'PY' &
# A logging HTTP proxy: forwards every request to 127.0.0.1:UPSTREAM and appends one JSON line per
# request and one per response (status, MCP headers, body; SSE bodies as they were streamed).
import http.client, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, upstream, wire = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()
seq = iter(range(1, 1 << 30))
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "upgrade"}

def record(entry):
    with lock, open(wire, "a") as f:
        f.write(json.dumps(entry) + "\n")

def mcp_headers(h):
    return {k.lower(): v for k, v in h.items() if k.lower().startswith("mcp-") or k.lower() in ("accept", "content-type")}

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection; the body ends when we close

    def log_message(self, *a):
        pass

    def forward(self):
        n = next(seq)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        record({"n": n, "dir": "request", "http": self.command, "path": self.path,
                "headers": mcp_headers(self.headers), "body": body.decode("utf-8", "replace")})
        c = http.client.HTTPConnection("127.0.0.1", upstream, timeout=300)
        c.request(self.command, self.path, body=body or None,
                  headers={k: v for k, v in self.headers.items() if k.lower() not in HOP})
        r = c.getresponse()
        self.send_response_only(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        got = bytearray()
        try:
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                got += chunk
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            pass
        finally:
            record({"n": n, "dir": "response", "status": r.status, "headers": mcp_headers(dict(r.getheaders())),
                    "body": bytes(got[:8 << 20]).decode("utf-8", "replace")})
            c.close()

    do_GET = do_POST = do_DELETE = forward

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
proxy_pid=$!
proxy_url="${mcp_url/127.0.0.1:$up_port/127.0.0.1:$proxy_port}"
for ((i = 0; i < 100; i++)); do
  "$PY" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$proxy_port" 2>/dev/null && break
  sleep 0.1
done

# ---------------------------------------------------------------------------------------------
# add both servers, then `claude mcp list`

add_log="$LOGS/claude-mcp-add.log"
if ! claude 60 mcp add machine-stdio -- "$D/stdio-tee.sh" stdio --workspace "$WORK/tree" --profile review >"$add_log" 2>&1; then
  fail "setup: claude mcp add (stdio) failed" "$add_log"
  exit 1
fi
if ! claude 60 mcp add --transport http machine-http "$proxy_url" --header "Authorization: Bearer $token" >>"$add_log" 2>&1; then
  fail "setup: claude mcp add --transport http failed" "$add_log"
  exit 1
fi

list_log="$LOGS/claude-mcp-list.log"
claude "$LIST_SECS" mcp list >"$list_log" 2>&1
list_rc=$?

connected() { # connected NAME: the `NAME: … - ✔ Connected` line of `claude mcp list`
  grep -q "^$1: .* - ✔ Connected\$" "$list_log"
}
for name in machine-stdio machine-http; do
  case "$name" in
    machine-stdio) what="stdio (machine-mcp stdio)"; extra=("$LOGS/claude-stdio-server.stderr") ;;
    *) what="http (machine-mcp up, bearer token)"; extra=("$up_log") ;;
  esac
  if connected "$name"; then
    pass "$what: claude mcp list → ✔ Connected"
  else
    line="$(grep "^$name: " "$list_log" || true)"
    fail "$what: claude mcp list (exit $list_rc) does not say connected: ${line:-no line for $name}" "$list_log" "${extra[@]}"
  fi
done

# ---------------------------------------------------------------------------------------------
# the wire: server/discover first, answered with a result naming 2026-07-28, and no initialize

wire_check() { # wire_check stdio|http: prints PASS/FAIL lines; the log files are dumped on FAIL
  "$PY" - "$1" "$STDIO_IN" "$STDIO_OUT" "$HTTP_WIRE" <<'PY'
import json, sys

kind, stdio_in, stdio_out, http_wire = sys.argv[1:5]
label = {"stdio": "stdio", "http": "http"}[kind]

def lines(path):
    out = []
    for raw in open(path, encoding="utf-8", errors="replace"):
        raw = raw.strip()
        if raw:
            try:
                out.append(json.loads(raw))
            except ValueError:
                out.append({"unparsed": raw[:200]})
    return out

def sse_messages(body):
    msgs, data = [], []
    for l in body.splitlines() + [""]:
        if l.startswith("data:"):
            data.append(l[5:].lstrip(" "))
        elif not l.strip() and data:
            try:
                msgs.append(json.loads("\n".join(data)))
            except ValueError:
                pass
            data = []
    return msgs

sent, answers = [], []  # client → server messages in order; server → client messages
if kind == "stdio":
    sent = lines(stdio_in)
    answers = lines(stdio_out)
else:
    entries = lines(http_wire)
    exchange = {e["n"]: e for e in entries if e.get("dir") == "response"}  # request n -> its response
    for e in entries:
        if e.get("dir") == "request" and e.get("http") == "POST":
            try:
                m = json.loads(e["body"])
            except ValueError:
                continue
            for x in m if isinstance(m, list) else [m]:
                x["__headers"] = e["headers"]
                x["__response"] = exchange.get(e["n"])
                sent.append(x)
        elif e.get("dir") == "response":
            b = e.get("body", "")
            if b.lstrip().startswith("{") or b.lstrip().startswith("["):
                try:
                    m = json.loads(b)
                    answers.extend(m if isinstance(m, list) else [m])
                except ValueError:
                    pass
            else:
                answers.extend(sse_messages(b))

methods = [m.get("method", "(response)") for m in sent]
summary = "client sent: " + (", ".join(methods) or "nothing")
def failed(why):
    print(f"FAIL claude-code {label}: {why}")
    print(f"    {summary}")
    sys.exit(1)

if not sent:
    failed("no request from Claude Code was recorded")
first = sent[0]
if first.get("method") != "server/discover":
    failed(f"its first request is {first.get('method')!r}, not server/discover")
pv = ((first.get("params") or {}).get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion")
ans = [a for a in answers if "id" in a and a.get("id") == first.get("id") and ("result" in a or "error" in a)]
http = ""
if kind == "http":
    r = first.get("__response")
    http = f" (HTTP {r['status']}: {r['body'][:300]})" if r else " (no HTTP response recorded)"
if not ans:
    failed(f"server/discover (id {first.get('id')!r}, _meta protocolVersion {pv}) got no JSON-RPC answer with its id{http}")
a = ans[0]
if "error" in a:
    failed(f"server/discover (protocolVersion {pv}) was answered with error {json.dumps(a['error'])[:300]}{http}")
res = a["result"]
versions = res.get("supportedVersions") or []
if pv not in versions:
    failed(f"server/discover result's supportedVersions {versions} lack the requested {pv}")
init = [m for m in sent if m.get("method") == "initialize"]
if init:
    failed(f"server/discover succeeded (supportedVersions {versions}) but Claude Code still sent initialize "
           f"(protocolVersion {init[0].get('params', {}).get('protocolVersion')})")
# what followed discover must have been answered without an error (it is in the new era)
errs = []
for m in sent[1:]:
    if "id" in m and "method" in m:
        r = [x for x in answers if x.get("id") == m["id"] and ("result" in x or "error" in x)]
        if r and "error" in r[0]:
            errs.append(f"{m['method']}: {json.dumps(r[0]['error'])[:200]}")
if errs:
    failed("after server/discover: " + "; ".join(errs))
# no session in 2026-07-28: the server must not mint one (streamable-http.mdx, backward compatibility)
minted = [m.get("method") for m in sent if (m.get("__response") or {}).get("headers", {}).get("mcp-session-id")]
if minted:
    failed(f"an Mcp-Session-Id was minted in the 2026-07-28 era, on the answers to: {', '.join(minted)}")
# and the host got the tools in the new era: a tools/list with 2026-07-28 `_meta`, answered with tools
lists = [m for m in sent if m.get("method") == "tools/list"]
if not lists:
    failed("no tools/list followed server/discover")
lpv = ((lists[0].get("params") or {}).get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion")
lr = [x for x in answers if x.get("id") == lists[0].get("id") and "result" in x]
ntools = len((lr[0]["result"].get("tools") or [])) if lr else 0
if lpv != pv or not ntools:
    failed(f"tools/list after server/discover: _meta protocolVersion {lpv}, {ntools} tools in its answer")
print(f"PASS claude-code {label}: server/discover ({pv}) answered with supportedVersions {versions}; "
      f"no initialize follows; tools/list ({lpv}) gave {ntools} tools ({summary})")
PY
}

if wire_check stdio; then :; else
  failures=$((failures + 1))
  for f in "$STDIO_IN" "$STDIO_OUT" "$LOGS/claude-stdio-server.stderr"; do
    echo "    --- $(basename "$f")"
    tail -n 20 "$f" | cut -c 1-400 | sed 's/^/    | /'
  done
fi
if wire_check http; then :; else
  failures=$((failures + 1))
  echo "    --- $(basename "$HTTP_WIRE")"
  tail -n 30 "$HTTP_WIRE" | cut -c 1-400 | sed 's/^/    | /'
fi

[ "$failures" = 0 ]
