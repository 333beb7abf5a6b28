#!/usr/bin/env bash
# shellcheck disable=SC2016 # single-quoted ${...} below are JavaScript template literals
# Quick start on a fresh machine: build machine-mcp, try it with a real MCP client, and print
# ready-to-paste configuration for Claude Desktop, Claude Code, Cursor, Codex and VS Code.
#
#   scripts/quickstart.sh [--profile full|agent|edit|review] [WORKSPACE]
#
# WORKSPACE (default: the current directory) is the directory the server exposes. Steps:
#   1. cargo build --release --locked -p machine-mcp
#   2. install the MCP Inspector CLI (Node 22 and the pinned npm packages of tests/interop/, from the
#      npm registry, into tests/interop/.cache/ once; later runs reuse them)
#   3. drive `machine-mcp stdio --workspace WORKSPACE --profile review` (read-only) with the
#      Inspector CLI v2: list the tools, call server_info, search_text for to-do markers (5 at most)
#   4. print client configuration with the absolute paths of the binary and the workspace, using
#      --profile (default: review, read-only; edit allows writes, agent also runs processes)
# Progress goes to stderr, the results and the configuration to stdout. Exits non-zero, saying
# what failed, if any step fails. Environment: as for cargo (CARGO_TARGET_DIR, ...) and
# MACHINE_MCP_INTEROP_CACHE (the install's cache dir).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVER_NAME=machine
profile=review
workspace=""

usage() { echo "usage: scripts/quickstart.sh [--profile full|agent|edit|review] [WORKSPACE]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) [ $# -ge 2 ] || usage; profile="$2"; shift 2 ;;
    --profile=*) profile="${1#--profile=}"; shift ;;
    -h | --help) usage ;;
    -*) echo "quickstart: unknown option $1" >&2; usage ;;
    *) [ -z "$workspace" ] || usage; workspace="$1"; shift ;;
  esac
done
case "$profile" in full | agent | edit | review) ;; *) echo "quickstart: bad profile '$profile'" >&2; usage ;; esac

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

WORK="$(mktemp -d "${TMPDIR:-/tmp}/machine-mcp-quickstart.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
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

# 3. a real client: the Inspector CLI v2, one server process per call
n=0
# inspect DESCRIPTION ARGS...: run the Inspector CLI against the server; the JSON goes to $WORK/out.json
inspect() {
  local what="$1" rc
  shift
  n=$((n + 1))
  local log="$WORK/inspector-$n.log"
  step "Inspector CLI: $what"
  set +e
  (cd "$WORK" && MCP_CATALOG_PATH="$WORK/catalog.json" NO_COLOR=1 timeout 120 "$NODE" "$INSPECTOR" \
    --cli --format json "$BIN" stdio --workspace "$workspace" --profile review "$@") >"$WORK/out.json" 2>"$log"
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    { echo "--- stdout:"; cat "$WORK/out.json"; } >>"$log"
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

# 4. client configuration
args=(stdio --workspace "$workspace" --profile "$profile")
shq() { # shq WORD: quoted for a POSIX shell when needed
  case "$1" in
    "" | *[!A-Za-z0-9_./:=@%+,-]*) printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
    *) printf '%s' "$1" ;;
  esac
}
config() { # config KIND: a JSON or TOML snippet for the server
  "$NODE" -e '
    const [kind, name, command, ...args] = process.argv.slice(1);
    const q = JSON.stringify; // a JSON string is also a valid TOML basic string
    const list = `[${args.map(q).join(", ")}]`;
    // indented JSON, with the args array kept on one line
    const json = (o) => console.log(JSON.stringify(o, null, 2).replace(q("@ARGS@"), () => list));
    const entry = { command, args: "@ARGS@" };
    if (kind === "mcpServers") json({ mcpServers: { [name]: entry } });
    else if (kind === "vscode") json({ servers: { [name]: { type: "stdio", ...entry } } });
    else if (kind === "toml") console.log(`[mcp_servers.${name}]\ncommand = ${q(command)}\nargs = ${list}`);
  ' "$1" "$SERVER_NAME" "$BIN" "${args[@]}"
}
claude_cmd="claude mcp add --transport stdio $SERVER_NAME --"
for w in "$BIN" "${args[@]}"; do claude_cmd+=" $(shq "$w")"; done
if json_cfg="$(config mcpServers)" && toml_cfg="$(config toml)" && vscode_cfg="$(config vscode)"; then :; else
  die "cannot write the client configuration"
fi

cat <<EOF

Client configuration: server "$SERVER_NAME", --profile $profile (review: read-only; edit: writes; agent: writes
and processes; full: everything; choose with scripts/quickstart.sh --profile P). Merge each snippet
into an existing file rather than replacing it.

## Claude Desktop: claude_desktop_config.json
##   (Linux ~/.config/Claude/, macOS ~/Library/Application Support/Claude/, Windows %APPDATA%\\Claude\\)
$json_cfg

## Claude Code (add --scope user to use it in every project)
$claude_cmd

## Cursor: .cursor/mcp.json in the project (or ~/.cursor/mcp.json for all projects)
$json_cfg

## Codex: ~/.codex/config.toml
$toml_cfg

## VS Code: .vscode/mcp.json
$vscode_cfg
EOF
step "done"
