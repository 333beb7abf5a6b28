#!/usr/bin/env bash
# shellcheck disable=SC2016 # single-quoted ${...} below are JavaScript template literals
# Quick start on a fresh machine: build machine-mcp, start `machine-mcp up` (relay and daemon on
# loopback), try it with a real MCP client over Streamable HTTP, and print ready-to-paste client
# configuration with the URL and bearer token filled in, and the OAuth account to sign in with.
#
#   scripts/quickstart.sh [--profile full|agent|edit|review] [--listen ADDR] [--state-dir DIR] [WORKSPACE]
#
# WORKSPACE (default: the current directory) is the directory the server exposes. Steps:
#   1. cargo build --release --locked -p machine-mcp
#   2. install the MCP Inspector CLI (Node 22 and the pinned npm packages of tests/interop/, from the
#      npm registry, into tests/interop/.cache/ once; later runs reuse them)
#   3. start `machine-mcp up --workspace WORKSPACE --listen ADDR --profile PROFILE --json` (ADDR
#      default 127.0.0.1:8750; PROFILE default review, read-only, while `up` itself defaults to
#      full; the output says so) and wait for its JSON line (MCP
#      URL and bearer token). The token lives in the state directory (default: machine-mcp's own,
#      $MACHINE_MCP_STATE_DIR, else $XDG_STATE_HOME/machine-mcp, else ~/.local/state/machine-mcp),
#      so it stays the same across runs and the printed configuration keeps working.
#   4. drive it with the Inspector CLI v2 over Streamable HTTP with the token (from a 0600 config
#      file, not the command line): list the tools, call server_info, search_text for to-do
#      markers (5 at most)
#   5. stop `up` (SIGINT) and print client configuration: Claude Code, Cursor and VS Code over
#      HTTP, mcp-remote for stdio-only clients, then the local (stdio) configurations
# Progress goes to stderr, the results and the configuration to stdout. Exits non-zero, saying
# what failed, if any step fails (a busy port included). Environment: as for cargo
# (CARGO_TARGET_DIR, ...), MACHINE_MCP_STATE_DIR and MACHINE_MCP_INTEROP_CACHE (the install's
# cache dir).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVER_NAME=machine
READY_SECS=90 # for `up` to print its JSON line
STOP_SECS=15  # for `up` to exit after SIGINT
profile=review
listen=127.0.0.1:8750
state_dir=""
workspace=""

usage() {
  echo "usage: scripts/quickstart.sh [--profile full|agent|edit|review] [--listen ADDR] [--state-dir DIR] [WORKSPACE] (--help for more)" >&2
  exit 2
}
help() {
  cat <<'EOF'
usage: scripts/quickstart.sh [--profile full|agent|edit|review] [--listen ADDR] [--state-dir DIR] [WORKSPACE]

Builds machine-mcp (cargo build --release), starts `machine-mcp up` on WORKSPACE, drives it with
the MCP Inspector CLI, stops it, and prints client configuration for it.

It exposes the workspace with --profile review (read-only) unless told otherwise, while
`machine-mcp up` itself defaults to --profile full. For full access:
scripts/quickstart.sh --profile full.

Options:
  --profile P      review (default: read-only), edit (writes), agent (writes and processes),
                   full (everything)
  --listen ADDR    where `machine-mcp up` listens (default 127.0.0.1:8750)
  --state-dir DIR  machine-mcp's state directory (default: $MACHINE_MCP_STATE_DIR, else
                   $XDG_STATE_HOME/machine-mcp, else ~/.local/state/machine-mcp)
  WORKSPACE        the directory to expose (default: the current directory)
  -h, --help       this help (nothing is built or started)
EOF
  exit 0
}
while [ $# -gt 0 ]; do
  case "$1" in
    --profile | --listen | --state-dir)
      [ $# -ge 2 ] || usage
      case "$1" in --profile) profile="$2" ;; --listen) listen="$2" ;; --state-dir) state_dir="$2" ;; esac
      shift 2
      ;;
    --profile=*) profile="${1#--profile=}"; shift ;;
    --listen=*) listen="${1#--listen=}"; shift ;;
    --state-dir=*) state_dir="${1#--state-dir=}"; shift ;;
    -h | --help) help ;;
    -*) echo "quickstart: unknown option $1" >&2; usage ;;
    *) [ -z "$workspace" ] || usage; workspace="$1"; shift ;;
  esac
done
case "$profile" in full | agent | edit | review) ;; *) echo "quickstart: bad profile '$profile'" >&2; usage ;; esac
profile_note=""
[ "$profile" != review ] ||
  profile_note=" (read-only: the quick start's default, while \`machine-mcp up\` defaults to full; for full access: scripts/quickstart.sh --profile full)"
port="${listen##*:}"
host="${listen%:*}"
host="${host#[}"
host="${host%]}"
case "$port" in "" | *[!0-9]*) echo "quickstart: bad --listen '$listen' (want HOST:PORT, e.g. 127.0.0.1:8751)" >&2; usage ;; esac

step() { echo "quickstart: $*" >&2; }
die() { # die MESSAGE [LOG]
  echo "quickstart: FAILED: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    echo "    --- $2 (last 40 lines)" >&2
    tail -n 40 "$2" | sed 's/^/    | /' >&2
  fi
  exit 1
}

workspace="${workspace:-$PWD}"
[ -d "$workspace" ] || die "workspace $workspace is not a directory"
workspace="$(cd "$workspace" && pwd -P)"
if [ -n "$state_dir" ]; then
  mkdir -p "$state_dir" || die "cannot create the state directory $state_dir"
  state_dir="$(cd "$state_dir" && pwd -P)"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/machine-mcp-quickstart.XXXXXX")"
up_pid="" up_ready=0
# stop_up: SIGINT to `up` (SIGTERM while it is not ready yet: a background job of a script starts
# with SIGINT ignored, and `up` only handles it once it is ready), then wait for it (killed after
# STOP_SECS); sets up_rc
stop_up() {
  local i sig=INT
  up_rc=""
  [ -n "$up_pid" ] || return 0
  [ "$up_ready" = 1 ] || sig=TERM
  kill -"$sig" "$up_pid" 2>/dev/null || true
  for ((i = 0; i < STOP_SECS * 10; i++)); do
    kill -0 "$up_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$up_pid" 2>/dev/null; then
    step "machine-mcp up did not stop within ${STOP_SECS}s of SIG$sig; killing it"
    kill -KILL "$up_pid" 2>/dev/null || true
  fi
  set +e
  wait "$up_pid" 2>/dev/null
  up_rc=$?
  set -e
  up_pid=""
}
trap 'stop_up; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
exec </dev/null

# 1. build
command -v cargo >/dev/null || die "cargo not found (install Rust with rustup)"
step "building: cargo build --release --locked -p machine-mcp"
(cd "$REPO" && cargo build --release --locked -p machine-mcp) >&2 || die "cargo build --release --locked -p machine-mcp"

# 2. install the client (Node 22 + the pinned npm packages; the Python part is not needed)
install_note() { step "$*"; }
install_fatal() { die "install: $1" "${2:-}"; }
INSTALL_LOG_DIR="$WORK"
# shellcheck source-path=SCRIPTDIR source=../tests/interop/install.sh
source "$REPO/tests/interop/install.sh" node
INSPECTOR="$MODULES/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
[ -f "$INSPECTOR" ] || die "no Inspector CLI v2 at $INSPECTOR"

target_dir="$(cd "$REPO" && cargo metadata --no-deps --format-version 1 --locked |
  "$NODE" -e 'let s = ""; process.stdin.on("data", d => s += d).on("end", () => console.log(JSON.parse(s).target_directory))')" \
  || die "cannot read the target directory from cargo metadata"
BIN="$target_dir/release/machine-mcp"
[ -x "$BIN" ] || die "no executable at $BIN"
version="$("$BIN" --version 2>&1)" || die "$BIN --version failed"

# 3. start `machine-mcp up`
busy_msg="$listen is already in use (another \`machine-mcp up\`?): stop it, or choose another port with scripts/quickstart.sh --listen 127.0.0.1:$((port + 1))"
if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then die "$busy_msg"; fi
up_args=(up --workspace "$workspace" --listen "$listen" --profile "$profile")
[ -z "$state_dir" ] || up_args+=(--state-dir "$state_dir")
step "starting: machine-mcp ${up_args[*]} --json"
: >"$WORK/up.json"
"$BIN" "${up_args[@]}" --json >"$WORK/up.json" 2>"$WORK/up.log" &
up_pid=$!
for ((i = 0; i < READY_SECS * 10; i++)); do
  line="$(head -n 1 "$WORK/up.json")"
  if [[ "$line" == "{"*"}" ]]; then up_ready=1; break; fi
  if ! kill -0 "$up_pid" 2>/dev/null; then
    wait "$up_pid" 2>/dev/null || true
    up_pid=""
    if grep -qi "address already in use" "$WORK/up.log"; then die "$busy_msg" "$WORK/up.log"; fi
    die "machine-mcp up exited before it was ready" "$WORK/up.log"
  fi
  sleep 0.1
done
[[ "$line" == "{"*"}" ]] || die "machine-mcp up printed no JSON line within ${READY_SECS}s" "$WORK/up.log"
# up_field EXPR: JS expression over the JSON line `j`
up_field() { "$NODE" -e 'const j = JSON.parse(process.argv[1]); console.log(eval(process.argv[2]) ?? "")' "$line" "$1"; }
url="$(up_field j.mcp_url)" || die "unexpected JSON line from machine-mcp up: $line"
token="$(up_field j.token)" || die "unexpected JSON line from machine-mcp up: $line"
if [ -z "$url" ] || [ -z "$token" ]; then die "no MCP URL or token in machine-mcp up's JSON line: $line"; fi
account="$(up_field j.account)" || die "unexpected JSON line from machine-mcp up: $line"
password="$(up_field j.password)" || die "unexpected JSON line from machine-mcp up: $line"
if [ -n "$password" ]; then
  password_note="password $password (shown once: the account was created now; keep it)"
else
  password_note="the password printed when the account was created (reset: $(shq "$BIN") relay account rotate-password --up${state_dir:+ --state-dir $(shq "$state_dir")})"
fi
step "up: $url, --profile $profile$profile_note"

# 4. a real client: the Inspector CLI v2 over Streamable HTTP, one session per call; the token
# goes in a 0600 config file rather than on the command line
(umask 077 && "$NODE" -e '
  const [name, url, token] = process.argv.slice(1);
  const entry = { type: "http", url, headers: { Authorization: `Bearer ${token}` } };
  console.log(JSON.stringify({ mcpServers: { [name]: entry } }));
' "$SERVER_NAME" "$url" "$token" >"$WORK/inspector.json") || die "cannot write the Inspector config"
n=0
# inspect DESCRIPTION ARGS...: run the Inspector CLI against the server; the JSON goes to $WORK/out.json
inspect() {
  local what="$1" rc
  shift
  n=$((n + 1))
  local log="$WORK/inspector-$n.log"
  step "Inspector CLI: $what"
  set +e
  (cd "$WORK" && NO_COLOR=1 MCP_INSPECTOR_SECRET_STORE=memory timeout 120 "$NODE" "$INSPECTOR" \
    --cli --format json --config "$WORK/inspector.json" --server "$SERVER_NAME" "$@") >"$WORK/out.json" 2>"$log"
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    { echo "--- stdout:"; cat "$WORK/out.json"; echo "--- machine-mcp up's log:"; tail -n 20 "$WORK/up.log"; } >>"$log"
    if [ "$rc" = 124 ]; then die "Inspector CLI $what: timed out after 120s" "$log"; fi
    die "Inspector CLI $what: exit $rc" "$log"
  fi
}
# show JS: print what the JS expression makes of the JSON result `r` (the Inspector's `result`)
show() {
  "$NODE" -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).result;
    if (!r) throw new Error("no result in the Inspector output");
    const out = eval(process.argv[2]);
    process.stdout.write(Array.isArray(out) ? out.join("\n") + "\n" : out + "\n");
  ' "$WORK/out.json" "$1" || die "unexpected Inspector output: $(head -c 400 "$WORK/out.json")"
}

echo "machine-mcp: $BIN ($version)"
echo "workspace:   $workspace"
echo "profile:     $profile$profile_note"
echo "MCP URL:     $url (Streamable HTTP, while \`machine-mcp up\` runs)"
echo
inspect "tools/list" --method tools/list
show '`tools (${r.tools.length}): ` + r.tools.map(t => t.name).join(", ")'
inspect "tools/call server_info" --method tools/call --tool-name server_info
show '((s) => `server_info: profile ${s.policy.profile}, workspace ${s.workspace}, ${s.tools.length} tools, ` +
  `protocol ${s.protocol_version}`)(r.structuredContent)'
marker="TO""DO" # spelled so that this file does not match its own search
inspect "tools/call search_text $marker" --method tools/call --tool-name search_text \
  --tool-args-json "{\"pattern\": \"$marker\", \"literal\": true, \"max_matches\": 5}"
show '((s) => [`search_text "'"$marker"'" (max 5): ${s.matches.length} match(es) in ${s.files_searched} file(s) searched` +
    (s.complete ? "" : ", more not shown"),
  ...s.matches.map(m => `  ${m.path}:${m.line}: ${m.text.trim().slice(0, 160)}`)].concat(s.matches.length ? [] : ["  (none)"]))(r.structuredContent)'

# 5. stop the server, then the configuration
step "stopping machine-mcp up (SIGINT)"
stop_up
[ "$up_rc" = 0 ] || die "machine-mcp up exited with status $up_rc after SIGINT" "$WORK/up.log"

shq() { # shq WORD: quoted for a POSIX shell when needed
  case "$1" in
    "" | *[!A-Za-z0-9_./:=@%+,-]*) printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
    *) printf '%s' "$1" ;;
  esac
}
shell_cmd() { # shell_cmd WORD...: a command line, quoted
  local out="" w
  for w in "$@"; do out+="${out:+ }$(shq "$w")"; done
  printf '%s' "$out"
}
stdio_args=(stdio --workspace "$workspace" --profile "$profile")
# config KIND: a JSON or TOML snippet
config() {
  "$NODE" -e '
    const [kind, name, url, token, command, ...args] = process.argv.slice(1);
    const q = JSON.stringify; // a JSON string is also a valid TOML basic string
    // indented JSON, with arrays of strings kept on one line
    const json = (o) => console.log(JSON.stringify(o, null, 2).replace(/\[\n\s+("[^\n]*"(,\n\s+"[^\n]*")*)\n\s+\]/g,
      (_, items) => `[${items.split(/,\n\s+/).join(", ")}]`));
    const headers = { Authorization: `Bearer ${token}` };
    const stdio = { command, args };
    switch (kind) {
      case "cursor": json({ mcpServers: { [name]: { url, headers } } }); break;
      case "vscode": json({ servers: { [name]: { type: "http", url, headers } } }); break;
      // mcp-remote substitutes ${AUTH_HEADER} itself: no space in an argument (some clients split them)
      case "mcp-remote": json({ mcpServers: { [name]: { command: "npx",
        args: ["-y", "mcp-remote", url, "--transport", "http-only", "--header", "Authorization:${AUTH_HEADER}"],
        env: { AUTH_HEADER: `Bearer ${token}` } } } }); break;
      case "stdio": json({ mcpServers: { [name]: stdio } }); break;
      case "vscode-stdio": json({ servers: { [name]: { type: "stdio", ...stdio } } }); break;
      case "toml": console.log(`[mcp_servers.${name}]\ncommand = ${q(command)}\nargs = [${args.map(q).join(", ")}]`); break;
    }
  ' "$1" "$SERVER_NAME" "$url" "$token" "$BIN" "${stdio_args[@]}"
}
for kind in cursor vscode mcp-remote stdio vscode-stdio toml; do
  cfg="$(config "$kind")" || die "cannot write the client configuration"
  printf -v "cfg_${kind//-/_}" '%s' "$cfg"
done
up_cmd="$(shell_cmd "$BIN" up --workspace "$workspace" --profile "$profile")"
[ "$listen" = 127.0.0.1:8750 ] || up_cmd+=" --listen $(shq "$listen")"
[ -z "$state_dir" ] || up_cmd+=" --state-dir $(shq "$state_dir")"
claude_http="claude mcp add --transport http $SERVER_NAME $(shq "$url") --header $(shq "Authorization: Bearer $token")"
claude_stdio="claude mcp add --transport stdio $SERVER_NAME -- $(shell_cmd "$BIN" "${stdio_args[@]}")"

# shellcheck disable=SC2154 # cfg_* are set by printf -v above
cat <<EOF

Client configuration: server "$SERVER_NAME", --profile $profile (review: read-only; edit: writes; agent: writes
and processes; full: everything; choose with scripts/quickstart.sh --profile P). Merge each snippet
into an existing file rather than replacing it.

== Remote (Streamable HTTP) clients: start the server first and keep it running (Ctrl-C stops it);
   the token is kept in its state directory, so it stays valid across restarts:
$up_cmd

## Clients that sign in with OAuth (ChatGPT, Claude, Claude Code, VS Code, Cursor, mcp-remote) need
## only the URL $url (public HTTPS for hosted ones: see docs/relay.md, "Publishing up");
## on the consent page they open, sign in as account ${account:-owner}, $password_note
claude mcp add --transport http $SERVER_NAME $(shq "$url")

## Claude Code with the bearer token instead (add --scope user to use it in every project)
$claude_http

## Cursor: .cursor/mcp.json in the project (or ~/.cursor/mcp.json for all projects)
$cfg_cursor

## VS Code: .vscode/mcp.json
$cfg_vscode

## Stdio-only clients (e.g. Claude Desktop: claude_desktop_config.json), through mcp-remote (needs npx)
$cfg_mcp_remote

== Local (stdio) clients: the client starts machine-mcp itself; no server to keep running

## Claude Code
$claude_stdio

## Claude Desktop (claude_desktop_config.json) and Cursor (.cursor/mcp.json)
$cfg_stdio

## Codex: ~/.codex/config.toml
$cfg_toml

## VS Code: .vscode/mcp.json
$cfg_vscode_stdio
EOF
step "done"
