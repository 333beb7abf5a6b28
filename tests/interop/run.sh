#!/usr/bin/env bash
# Interop tests: drive real third-party MCP clients against `machine-mcp stdio` and, through
# `machine-mcp up` (relay and daemon on loopback), over Streamable HTTP with a bearer token or
# signed in with OAuth (mcp-remote, the SDKs' OAuth clients, the consent page in headless Chromium),
# handshake-era sessions across a daemon restart and an automatic upgrade behind `relay serve`
# (restart.py), and real hosts (Claude Code, Gemini CLI, Codex CLI) against a mock model endpoint.
#
#   tests/interop/run.sh [PATH-TO-machine-mcp]     (default: `cargo build` and use target/debug)
#
# The conformance fixture server (crates/conformance-fixture) is always built with cargo; with no
# argument machine-mcp is built too.
#
# Installs its clients itself (Node 22 and the pinned npm packages from the npm registry, the
# pinned Python `mcp` SDK from PyPI) into a cache dir, once; later runs reuse it. Prints one
# PASS/FAIL line per check, details only for failures, and ends with the line
# `interop: N passed, M failed`; exits non-zero if anything failed. See README.md.
#
# Environment:
#   MACHINE_MCP_INTEROP_CACHE   cache dir (default: tests/interop/.cache)
#   MACHINE_MCP_INTEROP_PYTHON  Python >= 3.11 for the venv (default: python3)
#   MACHINE_MCP_INTEROP_KEEP=1  keep the temp work dir (trees, logs, suite results, `up` state dirs)
#   MACHINE_MCP_INTEROP_PARTS   which parts to run (default: "stdio relay restart host hosts"; restart =
#                               sessions across a daemon restart and upgrade, host = Claude Code's
#                               health check, hosts = the host matrix and the strict SSE client)
#   MACHINE_MCP_INTEROP_CHROMIUM  the Chromium for the consent-page checks (default: /usr/bin/chromium,
#                               Debian's; scripts/test.sh installs it)
#   MACHINE_MCP_INTEROP_ARTIFACTS where to keep the consent page screenshots (default: <target dir>/interop-artifacts)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
SCENARIOS=(server-initialize ping tools-list)

PARTS=" ${MACHINE_MCP_INTEROP_PARTS:-stdio relay restart host hosts} "
UP_STOP_SECS=15 # how long `up` may take to exit after SIGINT (then `timeout` kills it)
OAUTH_TTL=3     # access token lifetime of the OAuth clients' `up`: they must refresh past it

passed=0 failed=0 gw_pid="" start=$SECONDS
declare -A UP_PID=() # `machine-mcp up` processes still running: name -> pid (of its `timeout`)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/machine-mcp-interop.XXXXXX")"
mkdir -p "$WORK/logs"

cleanup() {
  if [ -n "$gw_pid" ]; then kill "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
  local name
  for name in "${!UP_PID[@]}"; do kill -INT "${UP_PID[$name]}" 2>/dev/null || true; done
  for name in "${!UP_PID[@]}"; do wait "${UP_PID[$name]}" 2>/dev/null || true; done
  if [ "${MACHINE_MCP_INTEROP_KEEP:-0}" = 1 ]; then echo "interop: work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

summary() { echo "interop: $passed passed, $failed failed"; }
dump() { # dump FILE: its last 40 lines, indented
  [ -f "$1" ] || return 0
  echo "    --- $(basename "$1")"
  tail -n 40 "$1" | sed 's/^/    | /'
}
fatal() { # fatal MESSAGE [LOG]: a setup step failed; nothing after it can run
  echo "FAIL setup: $1"
  [ -z "${2:-}" ] || dump "$2"
  failed=$((failed + 1))
  summary
  exit 1
}
note() { echo "interop: $*"; }

# tally GROUP SECONDS CMD...: run a check group; its stdout has `PASS name` / `FAIL name: why`
# lines (details indented after a FAIL). A group that exits non-zero without a FAIL line (crash,
# timeout) counts as one failure.
tally() {
  local group="$1" secs="$2" line rc="" group_failed=0
  shift 2
  while IFS= read -r line; do
    case "$line" in
      "PASS "*) passed=$((passed + 1)) ;;
      "FAIL "*) failed=$((failed + 1)); group_failed=1 ;;
      "__rc="*) rc="${line#__rc=}"; continue ;;
    esac
    echo "$line"
  done < <(set +e; timeout "$secs" "$@" 2>"$WORK/logs/$group.stderr"; echo "__rc=$?")
  if [ "$rc" != 0 ] && [ "$group_failed" = 0 ]; then
    failed=$((failed + 1))
    if [ "$rc" = 124 ]; then echo "FAIL $group: timed out after ${secs}s"; else echo "FAIL $group: exited $rc"; fi
    dump "$WORK/logs/$group.stderr"
  fi
}

# ---------------------------------------------------------------------------------------------
# install (install.sh: each step guarded by a stamp file, so a second run does no network access);
# defines NODE, MODULES, PY, VENV and CACHE

install_note() { note "$@"; }
install_fatal() { fatal "$@"; }
INSTALL_LOG_DIR="$WORK/logs"
# shellcheck source-path=SCRIPTDIR source=install.sh
source "$HERE/install.sh" all

# ---------------------------------------------------------------------------------------------
# the server binary and a real source tree (crates of our own dependency graph)

# the conformance fixture always comes from cargo; machine-mcp too unless given
packages=(-p conformance-fixture)
[ $# -ge 1 ] || packages=(-p machine-mcp "${packages[@]}")
(cd "$REPO" && timeout 1800 cargo build "${packages[@]}") >"$WORK/logs/build.log" 2>&1 \
  || fatal "cargo build ${packages[*]}" "$WORK/logs/build.log"
target_dir="$(cd "$REPO" && cargo metadata --no-deps --format-version 1 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')" \
  || fatal "cannot read the target directory from cargo metadata"
if [ $# -ge 1 ]; then
  BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
else
  BIN="$target_dir/debug/machine-mcp"
fi
FIXTURE="$target_dir/debug/conformance-fixture"
ARTIFACTS="${MACHINE_MCP_INTEROP_ARTIFACTS:-$target_dir/interop-artifacts}" # kept after the run
[ -x "$BIN" ] || fatal "no executable at $BIN"
"$BIN" --version >/dev/null 2>&1 || fatal "$BIN --version failed"
[ -x "$FIXTURE" ] || fatal "no executable at $FIXTURE"

(cd "$REPO" && timeout 600 cargo fetch --locked) >"$WORK/logs/cargo-fetch.log" 2>&1 || fatal "cargo fetch" "$WORK/logs/cargo-fetch.log"
timeout 300 "$PY" "$HERE/interop.py" tree "$WORK" >"$WORK/logs/tree.log" 2>&1 \
  || fatal "copying crates from the cargo registry" "$WORK/logs/tree.log"
note "server $BIN ($("$BIN" --version)); $(cat "$WORK/logs/tree.log")"

# ---------------------------------------------------------------------------------------------
# helpers

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CONF_JS="$MODULES/@modelcontextprotocol/conformance/dist/index.js"
CONF26_JS="$MODULES/conformance-2026/dist/index.js" # 0.2.0-alpha.12, the 2026-07-28 requirement set

# ---------------------------------------------------------------------------------------------
# stdio: `machine-mcp stdio` with the Python SDK, the Inspector CLI and (behind supergateway) a
# few conformance scenarios

stdio_part() {
  local s rc port
  # a. Python SDK (stdio client)
  tally python-sdk 240 "$PY" "$HERE/interop.py" sdk "$WORK" "$BIN"

  # b. MCP 2026-07-28 clients forced to the new era (modern.py): the Python SDK and the
  # TypeScript client 2.x against `machine-mcp stdio` and the fixture on stdio; discover then
  # initialize on one raw connection
  tally modern-raw 60 "$PY" "$HERE/modern.py" stdio raw "$WORK" "$BIN" "$FIXTURE"
  tally modern-python 300 "$PY" "$HERE/modern.py" stdio python "$WORK" "$BIN" "$FIXTURE"
  tally modern-ts 300 env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES" \
    "$PY" "$HERE/modern.py" stdio ts "$WORK" "$BIN" "$FIXTURE"

  # c. Inspector CLI v1 and v2
  tally inspector 400 env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES" \
    "$PY" "$HERE/interop.py" inspector "$WORK" "$BIN"

  # d. conformance suite, through supergateway (Streamable HTTP, one server child per session)
  shq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; } # quoting for the gateway's shell
  port="$(free_port)"
  "$NODE" "$MODULES/supergateway/dist/index.js" \
    --stdio "$(shq "$BIN") stdio --workspace $(shq "$WORK/tree") --profile review" \
    --outputTransport streamableHttp --stateful --port "$port" --streamableHttpPath /mcp \
    --healthEndpoint /healthz --logLevel info >"$WORK/logs/gateway.log" 2>&1 &
  gw_pid=$!
  if timeout 30 "$PY" - "http://127.0.0.1:$port/healthz" <<'PY'
import sys, time, urllib.request
while True:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2).read()
        break
    except OSError:
        time.sleep(0.2)
PY
  then
    for s in "${SCENARIOS[@]}"; do
      set +e
      timeout 120 "$NODE" "$CONF_JS" server \
        --url "http://localhost:$port/mcp" --scenario "$s" -o "$WORK/conformance" >"$WORK/logs/conformance-$s.log" 2>&1
      rc=$?
      set -e
      tally "conformance-$s" 60 "$PY" "$HERE/interop.py" conformance "$s" "$rc" "$WORK/conformance" \
        "$WORK/logs/conformance-$s.log" "$WORK/logs/gateway.log"
    done
  else
    echo "FAIL conformance: supergateway did not answer on 127.0.0.1:$port within 30s"
    dump "$WORK/logs/gateway.log"
    failed=$((failed + 1))
  fi
  kill "$gw_pid" 2>/dev/null || true
  wait "$gw_pid" 2>/dev/null || true
  gw_pid=""
}

# ---------------------------------------------------------------------------------------------
# relay: `machine-mcp up` (relay and daemon in one process on loopback), reached over Streamable
# HTTP: the whole conformance suite with the fixture server carried as an upstream (auth none,
# then with the static token and with an OAuth access token), the TypeScript SDK, the Python SDK
# and the Inspector CLI with a bearer token on the source tree (--profile agent), and the OAuth
# clients signing in (oauth.py)

# up_start NAME ARGS...: start `machine-mcp up ARGS --json` on a free loopback port with the state
# dir $WORK/state-NAME, and wait (60 s) for its JSON line in $WORK/logs/up-NAME.json (its log:
# up-NAME.log). A port taken meanwhile is retried. On failure, prints a FAIL line and returns 1.
up_start() {
  local name="$1" try port pid i line
  shift
  local json="$WORK/logs/up-$name.json" log="$WORK/logs/up-$name.log"
  for try in 1 2 3; do
    port="$(free_port)"
    : >"$json"
    # `timeout` bounds its life and forwards our SIGINT (then kills it UP_STOP_SECS later)
    timeout -k "$UP_STOP_SECS" 900 "$BIN" up --listen "127.0.0.1:$port" --state-dir "$WORK/state-$name" --json "$@" \
      >"$json" 2>"$log" &
    pid=$!
    UP_PID[$name]=$pid
    for ((i = 0; i < 600; i++)); do
      line="$(head -n 1 "$json")"
      if [[ "$line" == "{"*"}" ]]; then return 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "FAIL relay: up ($name) printed no JSON line within 60s"
    else
      wait "$pid" 2>/dev/null || true
      unset "UP_PID[$name]"
      if grep -qi "address already in use" "$log" && [ "$try" -lt 3 ]; then continue; fi
      echo "FAIL relay: up ($name) exited before it was ready"
    fi
    failed=$((failed + 1))
    dump "$log"
    up_stop "$name" quiet
    return 1
  done
}

# up_field NAME EXPR: a field of up NAME's JSON line (EXPR indexes `j` in Python)
up_field() { "$PY" -c 'import json, sys; j = json.loads(open(sys.argv[1]).readline()); print(eval(sys.argv[2]))' "$WORK/logs/up-$1.json" "$2"; }

# up_stop NAME [quiet]: SIGINT, then check that it exits 0 within UP_STOP_SECS and leaves none of
# its child processes (upstream servers) behind: a check of its own unless quiet
up_stop() {
  local name="$1" quiet="${2:-}" pid="${UP_PID[$1]:-}" mcp kids="" rc i k alive=""
  [ -n "$pid" ] || return 0
  unset "UP_PID[$name]"
  mcp="$(pgrep -P "$pid" | head -n 1 || true)" # machine-mcp, under `timeout`
  [ -z "$mcp" ] || kids="$(pgrep -P "$mcp" | tr '\n' ' ' || true)"
  kill -INT "$pid" 2>/dev/null || true
  set +e
  wait "$pid"
  rc=$?
  set -e
  [ -z "$quiet" ] || return 0
  # its children get EOF or a kill when it exits; give them (and their reaping) 10 s
  for ((i = 0; i < 100; i++)); do
    alive=""
    for k in $kids; do if kill -0 "$k" 2>/dev/null; then alive+="$k "; fi; done
    [ -n "$alive" ] || break
    sleep 0.1
  done
  [ -z "$kids" ] || echo "up ($name): children ${kids}gone after ~$((i * 100)) ms" >>"$WORK/logs/up-$name.log"
  if [ "$rc" = 0 ] && [ -z "$alive" ]; then
    passed=$((passed + 1))
    echo "PASS relay: up ($name) stops on SIGINT (exit 0, no child left)"
  else
    failed=$((failed + 1))
    if [ "$rc" = 137 ]; then rc="killed after ${UP_STOP_SECS}s"; else rc="exit $rc"; fi
    echo "FAIL relay: up ($name) on SIGINT: $rc; children still running: ${alive:-none}"
    dump "$WORK/logs/up-$name.log"
  fi
}

# conformance_run NAME LABEL BASELINE [HEADERS-JSON [RUN]]: the whole active suite against up
# NAME's upstream `conformance` (as http://localhost:PORT/..., which dns-rebinding-protection
# needs), HEADERS added to the suite's fetch by inject-headers.mjs; then judge it. RUN (default
# NAME) names its results, log and check group, for a second run against the same `up`
conformance_run() {
  local name="$1" label="$2" baseline="$3" headers="${4:-}" run="${5:-$1}" url rc out="$WORK/conformance-${5:-$1}"
  local log="$WORK/logs/conformance-$run.log" suite=("$NODE") inject="${4:-}"
  url="$(up_field "$name" 'j["servers"]["conformance"]')" || { echo "FAIL $label: no upstream conformance in up's JSON"; failed=$((failed + 1)); return; }
  url="${url/http:\/\/127.0.0.1:/http://localhost:}"
  if [ -n "$headers" ]; then suite+=(--import "$HERE/inject-headers.mjs"); else inject='{}'; fi
  set +e
  INTEROP_INJECT_URL="$url" INTEROP_INJECT_HEADERS="$inject" timeout 300 "${suite[@]}" "$CONF_JS" server \
    --url "$url" --suite active ${baseline:+--expected-failures "$baseline"} -o "$out" >"$log" 2>&1
  rc=$?
  set -e
  tally "relay-conformance-$run" 60 "$PY" "$HERE/interop.py" conformance-suite "$label" "$rc" "$out" "$log" \
    "$baseline" "$WORK/logs/up-$name.log"
}

# conformance26_run NAME TARGET URL: the suite's 2026-07-28 requirement set (`--requirements
# 2026-07-28`, conformance 0.2.0-alpha.12) against URL of up NAME (auth none: some scenarios send
# raw requests past any fetch wrapper), judged by modern.py per TARGET (fixture, runtime = the
# daemon's built-in runtime, stdio = `machine-mcp stdio` carried as an upstream)
conformance26_run() {
  local name="$1" target="$2" url="$3" rc out="$WORK/conformance26-$2" log="$WORK/logs/conformance26-$2.log"
  url="${url/http:\/\/127.0.0.1:/http://localhost:}"
  set +e
  timeout 180 "$NODE" "$CONF26_JS" server --url "$url" --requirements 2026-07-28 -o "$out" >"$log" 2>&1
  rc=$?
  set -e
  tally "relay-conformance26-$target" 60 "$PY" "$HERE/modern.py" conformance "$target" \
    "relay conformance 2026-07-28 ($target)" "$rc" "$out" "$log" "$WORK/logs/up-$name.log"
}

relay_part() {
  local t0=$SECONDS token node_env
  "$PY" -c 'import json, sys; print(json.dumps({"mcpServers": {"conformance": {"command": sys.argv[1]}}}))' \
    "$FIXTURE" >"$WORK/servers.json"
  # the tree's `up` carries the fixture twice for the 2026-07-28 clients: both eras, and
  # --legacy-only (an old-era server the daemon has to bridge)
  "$PY" -c 'import json, sys; print(json.dumps({"mcpServers": {"conformance": {"command": sys.argv[1]},
    "legacy": {"command": sys.argv[1], "args": ["--legacy-only"]}}}))' "$FIXTURE" >"$WORK/servers-modern.json"
  # the auth-none `up` also carries `machine-mcp stdio` itself, for the 2026-07-28 suite
  "$PY" -c 'import json, sys; print(json.dumps({"mcpServers": {"conformance": {"command": sys.argv[1]},
    "machine": {"command": sys.argv[2], "args": ["stdio", "--workspace", sys.argv[3], "--profile", "review"]}}}))' \
    "$FIXTURE" "$BIN" "$WORK/tree" >"$WORK/servers-none.json"

  # a. conformance suite, auth none: all scenarios must pass; then the 2026-07-28 requirement set
  # against the fixture, the built-in runtime and `machine-mcp stdio` carried
  if up_start conf-none --workspace "$WORK/tree" --profile review --auth none --servers "$WORK/servers-none.json"; then
    conformance_run conf-none "relay conformance (auth none)" ""
    conformance26_run conf-none fixture "$(up_field conf-none 'j["servers"]["conformance"]')"
    conformance26_run conf-none runtime "$(up_field conf-none 'j["mcp_url"]')"
    conformance26_run conf-none stdio "$(up_field conf-none 'j["servers"]["machine"]')"
    up_stop conf-none
  fi
  # b. conformance suite with authentication (`up`'s default, --auth oauth): the static bearer
  # token, then an access token signed in for with OAuth (oauth.py token), added to the suite's fetch
  if up_start conf-token --workspace "$WORK/tree" --profile review --servers "$WORK/servers.json"; then
    token="$(up_field conf-token 'j["token"]')"
    conformance_run conf-token "relay conformance (token)" "$HERE/conformance-baseline-token.yml" \
      "{\"Authorization\": \"Bearer $token\"}"
    if token="$("$PY" "$HERE/oauth.py" token "$WORK/logs/up-conf-token.json" conformance 2>"$WORK/logs/oauth-token.log")"; then
      conformance_run conf-token "relay conformance (oauth token)" "$HERE/conformance-baseline-token.yml" \
        "{\"Authorization\": \"Bearer $token\"}" conf-oauth
    else
      echo "FAIL relay conformance (oauth token): no access token from a headless OAuth sign-in"
      failed=$((failed + 1))
      dump "$WORK/logs/oauth-token.log"
    fi
    up_stop conf-token
  fi

  # c. real clients with the bearer token: reads, searches and processes on the tree, edits on
  # copies in relay-edits (a second `up`)
  mkdir -p "$WORK/relay-edits"
  if up_start tree --workspace "$WORK/tree" --profile agent --servers "$WORK/servers-modern.json" && up_start edits --workspace "$WORK/relay-edits" --profile agent; then
    node_env=(env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES")
    local ups=("$WORK" "$WORK/logs/up-tree.json" "$WORK/logs/up-edits.json")
    tally relay-ts 180 "${node_env[@]}" "$PY" "$HERE/interop.py" relay ts "${ups[@]}"
    # the TypeScript SDK resuming by itself (GET + Last-Event-ID) after a proxy in the script
    # drops its SSE stream mid-call (ts-resume.mjs)
    tally relay-ts-resume 120 env INTEROP_TOKEN="$(up_field edits 'j["token"]')" "$NODE" "$HERE/ts-resume.mjs" \
      "$MODULES" "$(up_field edits 'j["mcp_url"]')" "$WORK/relay-edits"
    tally relay-python 180 "$PY" "$HERE/interop.py" relay python "${ups[@]}"
    tally relay-inspector 300 "${node_env[@]}" "$PY" "$HERE/interop.py" relay inspector "${ups[@]}"
    # the 2026-07-28 clients (modern.py): built-in runtime, and the fixture carried (both eras,
    # and --legacy-only through the daemon's era bridge)
    tally relay-modern-python 300 "$PY" "$HERE/modern.py" relay python "${ups[@]}"
    tally relay-modern-ts 300 "${node_env[@]}" "$PY" "$HERE/modern.py" relay ts "${ups[@]}"
  fi
  up_stop tree
  up_stop edits

  # d. OAuth clients (oauth.py) against an `up` whose access tokens live OAUTH_TTL seconds, on a
  # one-file workspace, signing in as the owner account `up` prints: mcp-remote (BROWSER =
  # fake-browser.py), the TypeScript and Python SDKs, the consent page in headless Chromium, and
  # the conformance suite's authorization-server scenarios
  mkdir -p "$WORK/oauth-ws"
  printf 'hello from the oauth workspace\n' >"$WORK/oauth-ws/hello.txt"
  if up_start oauth --workspace "$WORK/oauth-ws" --profile review --oauth-access-token-ttl-secs "$OAUTH_TTL"; then
    local oauth=(env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES" INTEROP_OAUTH_TTL="$OAUTH_TTL"
      INTEROP_CHROMIUM="${MACHINE_MCP_INTEROP_CHROMIUM:-/usr/bin/chromium}" "$PY" "$HERE/oauth.py")
    local oauth_up="$WORK/logs/up-oauth.json"
    tally oauth-mcp-remote 180 "${oauth[@]}" mcp-remote "$WORK" "$oauth_up"
    tally oauth-ts 120 "${oauth[@]}" ts "$WORK" "$oauth_up"
    tally oauth-python 180 "${oauth[@]}" python "$WORK" "$oauth_up"
    tally oauth-chromium 180 "${oauth[@]}" browser "$WORK" "$oauth_up" "$ARTIFACTS"
    tally oauth-authorization 180 "${oauth[@]}" authorization "$WORK" "$oauth_up"
    up_stop oauth
  fi
  note "relay part: $((SECONDS - t0))s"
}

# ---------------------------------------------------------------------------------------------
# restart: a relay (`relay serve --auth token`) and a separate daemon (`connect --enroll`, run from
# a copy of the binary in an install dir); the Python SDK and the TypeScript SDK keep the
# handshake-era session they opened across a graceful daemon restart and an automatic upgrade
# (restart.py, which starts and stops all of it)

restart_part() {
  local t0=$SECONDS
  tally restart 180 env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES" \
    "$PY" "$HERE/restart.py" "$WORK" "$BIN"
  note "restart part: $((SECONDS - t0))s"
}

# ---------------------------------------------------------------------------------------------
# hosts: the host matrix (hosts.py matrix): Claude Code, Gemini CLI and Codex CLI, each with a
# mock model endpoint on loopback (mock_model.py), load the tool list of `machine-mcp stdio` and of
# `up` over HTTP with a bearer token and make one real tool call through each; then a strict SSE
# client (every `data:` line parsed as JSON) for every protocol version through the same `up`

hosts_part() {
  local t0=$SECONDS ws="$WORK/hosts-ws"
  mkdir -p "$ws"
  if up_start hosts --workspace "$ws" --profile review; then
    tally hosts-matrix 600 env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES" \
      "$PY" "$HERE/hosts.py" matrix "$WORK" "$BIN" "$WORK/logs/up-hosts.json" "$ws"
    tally hosts-strict-sse 120 "$PY" "$HERE/hosts.py" strict-sse "$WORK/logs/up-hosts.json" "$ws"
    up_stop hosts
  fi
  note "hosts part: $((SECONDS - t0))s"
}

# ---------------------------------------------------------------------------------------------
# checks

if [[ "$PARTS" == *" stdio "* ]]; then stdio_part; fi
if [[ "$PARTS" == *" relay "* ]]; then relay_part; fi
if [[ "$PARTS" == *" restart "* ]]; then restart_part; fi
# a real host: Claude Code's CLI health-checks `machine-mcp stdio` and `up` (claude-code.sh)
if [[ "$PARTS" == *" host "* ]]; then
  tally claude-code 300 env INTEROP_NODE_MODULES="$MODULES" INTEROP_PY="$PY" "$HERE/claude-code.sh" "$WORK" "$BIN"
fi
if [[ "$PARTS" == *" hosts "* ]]; then hosts_part; fi

note "done in $((SECONDS - start))s"
summary
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
