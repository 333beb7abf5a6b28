#!/usr/bin/env python3
"""Checks for tests/interop/run.sh: real MCP clients against `machine-mcp stdio` and, through
`machine-mcp up`, against the relay over Streamable HTTP.

Subcommands (run.sh calls them; each check prints one line `PASS <name>` or
`FAIL <name>: <why>`, followed on failure by indented details):

  tree WORK            copy a few crates from the cargo registry into WORK/tree and write
                       WORK/tree.json (the files and patterns the checks use)
  sdk WORK BIN         Python `mcp` SDK client (stdio) checks
  inspector WORK BIN   Inspector CLI v1 and v2 checks (env: INTEROP_NODE, INTEROP_NODE_MODULES)
  conformance NAME RC OUTDIR LOG...
                       judge one conformance-suite scenario from its exit code and checks.json
  conformance-suite LABEL RC OUTDIR LOG BASELINE LOG...
                       judge one run of the whole active suite (BASELINE: its --expected-failures
                       file, or ""): one check that all scenarios ran, one per scenario
  relay ts|python|inspector WORK TREE_UP EDIT_UP
                       one client against two `machine-mcp up --profile agent --json` (their JSON
                       lines in TREE_UP and EDIT_UP; logs beside them as .log): TREE_UP serves
                       WORK/tree, EDIT_UP serves WORK/relay-edits (copies made here); `ts` and
                       `inspector` need INTEROP_NODE and INTEROP_NODE_MODULES
  tee LOG -- CMD...    run CMD, copying its stdin/stdout lines to LOG (to see the wire)

Only `sdk` and `relay python` need the `mcp` package; the rest use the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

# every tool of --profile full (the default), as tools/list must show it
TOOLS = {
    "server_info", "list_dir", "list_files", "read_file", "view_image",
    "search_text", "write_file", "edit_file", "apply_patch",
    "run_process", "exec_command", "start_process", "read_process", "write_process",
    "kill_process", "list_processes",
    "git_status", "git_diff", "git_log", "git_show", "git_commit",
    "start_job", "stage_job", "read_job", "list_jobs", "cancel_job", "list_local_resources",
    "session_bootstrap", "agent_context", "project_overview", "list_skills", "load_skill",
    "list_commands", "run_command", "search", "fetch",
    "delegate", "read_delegation", "list_delegations", "cancel_delegation", "agents_status",
}
# Crates to copy from the registry, in order of preference; any others fill up to MAX_CRATES.
PREFERRED_CRATES = ["serde_json", "memchr", "tokio", "similar", "globset"]
MAX_CRATES = 5
LITERAL = "fn new("  # a regex metacharacter: only a literal search finds it
REGEX = r"impl(<[^>]*>)? \w+ for \w+"  # same meaning in Rust's regex and Python's re
EDIT_SUFFIX = " // edited by machine-mcp interop"
CALL_TIMEOUT = 60


# ---------------------------------------------------------------------------------------------
# reporting

class Checks:
    def __init__(self) -> None:
        self.failed = 0

    def run(self, name: str, fn: Callable[[], Any], logs: Callable[[], list[Path]] = lambda: []) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported, none is fatal
            self.report(name, e, logs)
        else:
            self.report(name, None, logs)

    def report(self, name: str, e: BaseException | None, logs: Callable[[], list[Path]] = lambda: []) -> None:
        """Prints `PASS name`, or `FAIL name: why` for the exception `e` with the tails of `logs`."""
        if e is None:
            print(f"PASS {name}")
            sys.stdout.flush()
            return
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]  # anyio task groups wrap what the check raised
        self.failed += 1
        msg = str(e).strip() or type(e).__name__
        if not isinstance(e, AssertionError):
            msg = f"{type(e).__name__}: {msg}"
        print(f"FAIL {name}: {msg.splitlines()[0]}")
        for line in msg.splitlines()[1:40]:
            print(f"    {line}")
        for log in logs():
            dump(log)
        sys.stdout.flush()


def res(r: Any) -> dict[str, Any]:
    """A Python SDK result as the JSON the server sent (aliases, no nulls)."""
    return r.model_dump(mode="json", by_alias=True, exclude_none=True)

def dump(path: Path, lines: int = 40) -> None:
    if not path.exists():
        return
    text = path.read_text(errors="replace").splitlines()
    print(f"    --- {path.name} (last {min(lines, len(text))} of {len(text)} lines)")
    for line in text[-lines:]:
        print(f"    | {line[:300]}")


def check(cond: Any, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def short(value: Any, n: int = 400) -> str:
    s = value if isinstance(value, str) else json.dumps(value)
    return s if len(s) <= n else s[:n] + "..."


# ---------------------------------------------------------------------------------------------
# the source tree

def cmd_tree(work: Path) -> int:
    repo = Path(__file__).resolve().parents[2]
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False,
    )
    if meta.returncode != 0:
        print(meta.stderr, file=sys.stderr)
        return 1
    pkgs = {}
    for p in json.loads(meta.stdout)["packages"]:
        if (p.get("source") or "").startswith("registry+") and (Path(p["manifest_path"]).parent / "src").is_dir():
            pkgs.setdefault(p["name"], Path(p["manifest_path"]).parent)
    names = [n for n in PREFERRED_CRATES if n in pkgs]
    names += sorted(n for n in pkgs if n not in names)
    names = names[:MAX_CRATES]
    if len(names) < 3:
        print(f"need at least 3 registry crates in the dependency graph, found {names}", file=sys.stderr)
        return 1
    tree = work / "tree"
    crates = []
    for n in names:
        shutil.copytree(pkgs[n], tree / pkgs[n].name, symlinks=True)
        crates.append(pkgs[n].name)

    def rs_files(crate: str) -> list[Path]:
        return sorted((tree / crate / "src").rglob("*.rs"))

    # read target: the first crate's src/lib.rs, else its biggest source file
    read = tree / crates[0] / "src" / "lib.rs"
    if not read.is_file() or len(lines_of(read)) < 40:
        read = max(rs_files(crates[0]), key=lambda f: f.stat().st_size)
    check(len(lines_of(read)) >= 40, f"{read} is too short")
    # edit target: the smallest crate; a line holding "fn " that occurs once in its file, with
    # no "=" and nothing JSON-like (the Inspector CLI parses key=value and JSON in --tool-arg)
    by_size = sorted(crates, key=lambda c: sum(f.stat().st_size for f in (tree / c).rglob("*") if f.is_file()))
    edit = None
    for crate in by_size:
        for f in rs_files(crate):
            ls = lines_of(f)
            for line in ls:
                if "fn " in line and "=" not in line and ls.count(line) == 1 and len(line) < 100 \
                        and f.read_text().count(line) == 1:
                    edit = {"crate": crate, "path": str(f.relative_to(tree / crate)), "old": line}
                    break
            if edit:
                break
        if edit:
            break
    check(edit, "no line to edit found")
    # regex target: a crate where the pattern occurs (checked here with Python's re)
    rx = re.compile(REGEX)
    regex_crate = next((c for c in crates if any(rx.search(t) for f in rs_files(c) for t in lines_of(f))), None)
    check(regex_crate, f"no crate matches {REGEX}")
    manifest = {
        "tree": str(tree), "crates": crates,
        "read": str(read.relative_to(tree)), "edit": edit, "regex_crate": regex_crate,
    }
    (work / "tree.json").write_text(json.dumps(manifest, indent=2))
    print(f"tree: {', '.join(crates)} ({sum(1 for _ in tree.rglob('*') if _.is_file())} files)")
    return 0


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").split("\n")


def load_tree(work: Path) -> dict[str, Any]:
    return json.loads((work / "tree.json").read_text())


def edit_copy(work: Path, t: dict[str, Any], name: str) -> Path:
    """A fresh copy of the edit target's crate: edits never touch the shared tree."""
    dst = work / f"edit-{name}"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(Path(t["tree"]) / t["edit"]["crate"], dst, symlinks=True)
    return dst


# ---------------------------------------------------------------------------------------------
# shared result checks (tool results as plain JSON: structuredContent / content / isError)

def resolve(workspace: Path, p: str) -> Path:
    path = Path(p)
    if not path.is_absolute():
        path = workspace / path
    path = Path(os.path.normpath(path))
    check(path == workspace or workspace in path.parents, f"path {p!r} is outside the workspace {workspace}")
    return path


def structured(result: dict[str, Any]) -> dict[str, Any]:
    check(result.get("isError") is not True, f"unexpected isError result: {short(result)}")
    sc = result.get("structuredContent")
    check(isinstance(sc, dict), f"no structuredContent: {short(result)}")
    texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
    # The text block is readable text under a one-line summary (issue 14), not a JSON mirror.
    check(texts and texts[0].split("\n", 1)[0].strip(), "the text content has no summary line")
    return sc


def check_read(workspace: Path, rel: str, start: int, end: int, sc: dict[str, Any]) -> None:
    want = "".join(line + "\n" for line in lines_of(workspace / rel)[start - 1:end])
    check(sc.get("content") == want,
          f"read_file {rel} lines {start}-{end}: content differs\n"
          f"got:  {short(sc.get('content'), 200)}\nwant: {short(want, 200)}")
    check(sc.get("start_line") == start and sc.get("end_line") == end,
          f"start_line/end_line {sc.get('start_line')}/{sc.get('end_line')}, want {start}/{end}")
    check(resolve(workspace, sc["path"]) == workspace / rel, f"path {sc.get('path')!r} is not {rel}")


def check_matches(workspace: Path, sc: dict[str, Any], ok: Callable[[str], bool], what: str,
                  under: str | None = None) -> list[tuple[str, int, int]]:
    matches = sc.get("matches")
    check(isinstance(matches, list) and matches, f"{what}: no matches: {short(sc)}")
    seen = []
    for m in matches:
        f = resolve(workspace, m["path"])
        if under:
            check(workspace / under in f.parents, f"{what}: {m['path']} is not under {under}")
        check(f.is_file(), f"{what}: {m['path']} is not a file")
        ls = lines_of(f)
        check(1 <= m["line"] <= len(ls), f"{what}: {m['path']}:{m['line']} is past the end")
        line = ls[m["line"] - 1].rstrip("\r")
        check(ok(line), f"{what}: {m['path']}:{m['line']} does not match: {line!r}")
        check(m.get("text", "").rstrip("\r\n") == line, f"{what}: text {m.get('text')!r} is not line {m['line']}")
        seen.append((str(f), m["line"], m.get("column", 0)))
    return seen


def check_edit(workspace: Path, edit: dict[str, Any], before: str, sc: dict[str, Any]) -> None:
    f = workspace / edit["path"]
    after = f.read_text()
    want = before.replace(edit["old"], edit["old"] + EDIT_SUFFIX, 1)
    check(after == want, f"{edit['path']} on disk is not the edited text")
    diff = sc.get("diff", "")
    check(f"\n-{edit['old']}\n" in diff and f"\n+{edit['old']}{EDIT_SUFFIX}\n" in diff,
          f"diff lacks the -/+ lines:\n{short(diff, 600)}")
    check(sc.get("replacements") == 1, f"replacements {sc.get('replacements')}, want 1")
    check(sc.get("sha256") == hashlib.sha256(after.encode()).hexdigest(), "sha256 is not the new file's")
    check(sc.get("previous_sha256") == hashlib.sha256(before.encode()).hexdigest(),
          "previous_sha256 is not the old file's")


def check_boundary(result: dict[str, Any]) -> None:
    check(result.get("isError") is True, f"want isError:true, got {short(result)}")
    texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
    check(texts, "isError result has no text content")
    err = json.loads(texts[0])
    check(err.get("code") == "path_boundary", f"error code {err.get('code')!r}, want 'path_boundary': {short(err)}")


# ---------------------------------------------------------------------------------------------
# Python SDK

def cmd_sdk(work: Path, binary: str) -> int:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    t = load_tree(work)
    tree = Path(t["tree"])
    checks = Checks()
    logs = work / "logs"
    logs.mkdir(exist_ok=True)

    def params(ws: Path, *extra: str, wrap: Path | None = None) -> StdioServerParameters:
        args = ["stdio", "--workspace", str(ws), *extra]
        if wrap:  # put `interop.py tee` between the client and the server
            return StdioServerParameters(command=sys.executable,
                                         args=[__file__, "tee", str(wrap), "--", binary, *args])
        return StdioServerParameters(command=binary, args=args)

    def session(name: str, p: StdioServerParameters, mode: str = "legacy") -> Callable[[Any], Callable[[], None]]:
        """session(...)(body): run `body(client)` in a fresh client session; the server's
        stderr goes to logs/sdk-<name>.log."""
        def runner(body: Callable[[Any], Any]) -> Callable[[], None]:
            def go() -> None:
                async def main() -> None:
                    with open(logs / f"sdk-{name}.log", "a") as errlog, anyio.fail_after(CALL_TIMEOUT):
                        async with Client(stdio_client(p, errlog=errlog), mode=mode,
                                          read_timeout_seconds=CALL_TIMEOUT) as c:
                            await body(c)
                anyio.run(main)
            return go
        return runner

    async def basics(c: Any) -> None:
        check(c.protocol_version == "2025-11-25", f"negotiated {c.protocol_version!r}, want 2025-11-25")
        check(c.server_info and c.server_info.name == "machine-mcp", f"serverInfo {c.server_info!r}")
        check(c.server_capabilities.tools is not None, "no tools capability")

    async def tools_list(c: Any) -> None:
        tools = (await c.list_tools()).tools
        names = {x.name for x in tools}
        check(names == TOOLS, f"tools {sorted(names)}, want {sorted(TOOLS)}")
        for x in tools:
            check(x.input_schema.get("type") == "object", f"{x.name}: inputSchema type is not object")

    async def read_range(c: Any) -> None:
        r = res(await c.call_tool("read_file", {"path": t["read"], "start_line": 10, "end_line": 20}))
        check_read(tree, t["read"], 10, 20, structured(r))

    async def search_literal(c: Any) -> None:
        args = {"pattern": LITERAL, "literal": True, "max_matches": 5}
        sc = structured(res(await c.call_tool("search_text", args)))
        page1 = check_matches(tree, sc, lambda line: LITERAL in line, "literal search")
        check(len(page1) <= 5, f"{len(page1)} matches > max_matches 5")
        if sc.get("next_cursor"):  # the next page continues, without repeats
            sc2 = structured(res(await c.call_tool("search_text", {**args, "cursor": sc["next_cursor"]})))
            page2 = check_matches(tree, sc2, lambda line: LITERAL in line, "literal search page 2")
            check(not set(page1) & set(page2), "page 2 repeats matches of page 1")

    async def search_regex(c: Any) -> None:
        rx = re.compile(REGEX)
        sc = structured(res(await c.call_tool("search_text", {"pattern": REGEX, "path": t["regex_crate"]})))
        check_matches(tree, sc, lambda line: bool(rx.search(line)), "regex search", under=t["regex_crate"])

    def legacy(body: Callable[[Any], Any]) -> Callable[[], None]:
        return session("legacy", params(tree))(body)

    checks.run("python-sdk: initialize (legacy mode)", legacy(basics), lambda: [logs / "sdk-legacy.log"])
    checks.run(f"python-sdk: tools/list has the {len(TOOLS)} tools", legacy(tools_list), lambda: [logs / "sdk-legacy.log"])
    checks.run("python-sdk: read_file line range", legacy(read_range), lambda: [logs / "sdk-legacy.log"])
    checks.run("python-sdk: search_text literal (+ cursor page)", legacy(search_literal),
               lambda: [logs / "sdk-legacy.log"])
    checks.run("python-sdk: search_text regex under a path", legacy(search_regex), lambda: [logs / "sdk-legacy.log"])

    # -- issue 20: `machine-mcp stdio` is the supervisor; its worker process serves the calls
    async def supervised(c: Any) -> None:
        sc = structured(res(await c.call_tool("server_info", {})))
        sup = sc.get("supervisor")
        check(isinstance(sup, dict), f"server_info has no supervisor section: {short(sc)}")
        check(sup.get("state") == "serving", f"supervisor state {sup.get('state')!r}, want serving")
        worker = sup.get("worker_pid")
        check(isinstance(worker, int) and worker != sup.get("pid"), f"worker pid {worker!r}, supervisor {sup.get('pid')!r}")
        argv = Path(f"/proc/{worker}/cmdline").read_bytes().split(b"\0")
        check(b"--worker" in argv, f"process {worker} is not a worker: {argv!r}")
        check(sup.get("binary_version") == sc.get("version"), f"worker version {sup.get('binary_version')!r}")

    checks.run("python-sdk: server_info through the supervisor (a worker pid, state serving)", legacy(supervised),
               lambda: [logs / "sdk-legacy.log"])

    # -- edit_file on a copy
    ws = edit_copy(work, t, "sdk")
    edit = t["edit"]
    before = (ws / edit["path"]).read_text()

    async def do_edit(c: Any) -> None:
        args = {"path": edit["path"], "old_text": edit["old"], "new_text": edit["old"] + EDIT_SUFFIX}
        check_edit(ws, edit, before, structured(res(await c.call_tool("edit_file", args))))
        # a stale expected_sha256 is a conflict, and the file stays as it is
        stale = hashlib.sha256(before.encode()).hexdigest()
        r = res(await c.call_tool("edit_file", {**args, "old_text": edit["old"] + EDIT_SUFFIX,
                                                "new_text": edit["old"], "expected_sha256": stale}))
        check(r.get("isError") is True, f"stale expected_sha256: want isError, got {short(r)}")
        check(json.loads(r["content"][0]["text"]).get("code") == "conflict", f"want code conflict: {short(r)}")
        check((ws / edit["path"]).read_text() != before, "the conflicting edit was written")

    checks.run("python-sdk: edit_file on a copy (+ sha256 conflict)", session("edit", params(ws))(do_edit),
               lambda: [logs / "sdk-edit.log"])

    # -- a path outside the workspace under --profile agent
    outside = work / "outside.txt"
    outside.write_text("secret\n")

    async def boundary(c: Any) -> None:
        for p in [str(outside), "../outside.txt"]:
            check_boundary(res(await c.call_tool("read_file", {"path": p})))
        check_boundary(res(await c.call_tool("write_file", {"path": "../outside.txt", "content": "x"})))
        check(outside.read_text() == "secret\n", "the file outside the workspace was changed")

    checks.run("python-sdk: outside path is isError under --profile agent",
               session("agent", params(tree, "--profile", "agent"))(boundary), lambda: [logs / "sdk-agent.log"])

    # -- the SDK's default mode probes server/discover; answered, it stays on 2026-07-28 (no
    # initialize follows: issue 9, where it used to get -32601 and fall back)
    wire = logs / "sdk-auto-wire.log"

    async def auto(c: Any) -> None:
        check(c.protocol_version == "2026-07-28", f"negotiated {c.protocol_version!r}, want 2026-07-28")
        check(c.session.initialize_result is None, "an initialize result: the client fell back")
        check_read(tree, t["read"], 1, 3, structured(res(await c.call_tool(
            "read_file", {"path": t["read"], "end_line": 3}))))
        sent = [json.loads(line[2:]) for line in wire.read_text().splitlines() if line.startswith("> ")]
        got = [json.loads(line[2:]) for line in wire.read_text().splitlines() if line.startswith("< ")]
        methods = [m.get("method") for m in sent]
        check(methods[:1] == ["server/discover"] and "initialize" not in methods,
              f"client sent {methods}, want server/discover first and no initialize")
        reply = next((m for m in got if m.get("id") == sent[0].get("id")), None)
        check(reply and "2026-07-28" in (reply.get("result") or {}).get("supportedVersions", []),
              f"server/discover reply {short(reply)}, want a result offering 2026-07-28")

    checks.run("python-sdk: default mode (server/discover answered: 2026-07-28, no initialize)",
               session("auto", params(tree, wrap=wire), mode="auto")(auto), lambda: [logs / "sdk-auto.log", wire])

    # -- issue 18: each skill is a prompt and each instruction file a resource, in both eras
    ctx = work / "context-ws"
    skill = ctx / ".agents" / "skills" / "release-notes"
    skill.mkdir(parents=True, exist_ok=True)
    (ctx / ".git").mkdir(exist_ok=True)
    (ctx / "AGENTS.md").write_text("Run the tests before you commit.\n")
    (skill / "SKILL.md").write_text("---\nname: release-notes\ndescription: Write release notes "
                                    "from the git log\n---\n# Release notes\nRead git_log; group by type.\n")
    (skill / "template.md").write_text("## Added\n")

    async def context(c: Any) -> None:
        if c.mode != "2026-07-28":  # a forced 2026-07-28 client assumes capabilities, never asks
            check(c.server_capabilities.prompts is not None, "no prompts capability")
            check(c.server_capabilities.resources is not None, "no resources capability")
        prompts = (await c.list_prompts()).prompts
        check([(p.name, p.description) for p in prompts] == [("release-notes", "Write release notes from the git log")],
              f"prompts {prompts!r}")
        got = await c.get_prompt("release-notes")
        text = got.messages[0].content.text
        check(got.messages[0].role == "user" and "group by type" in text and "template.md" in text,
              f"prompts/get release-notes: {short(text)}")
        resources = (await c.list_resources()).resources
        uris = [str(r.uri) for r in resources]
        check(uris == ["machine://context/chain", "machine://context/file/AGENTS.md"], f"resources {uris}")
        read = await c.read_resource("machine://context/file/AGENTS.md")
        check(read.contents[0].text == "Run the tests before you commit.\n", f"resources/read: {read!r}")
        chain = await c.read_resource("machine://context/chain")
        check("Run the tests" in chain.contents[0].text, f"the chain resource: {chain!r}")

    for mode in ["legacy", "auto", "2026-07-28"]:
        checks.run(f"python-sdk: skills as prompts, instruction files as resources ({mode})",
                   session(f"context-{mode}", params(ctx, "--profile", "agent"), mode=mode)(context),
                   lambda mode=mode: [logs / f"sdk-context-{mode}.log"])
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# Inspector CLI (v1 inspector-cli 1.0.3 and v2 inspector 2.12.0)

def cmd_inspector(work: Path, binary: str) -> int:
    node = os.environ["INTEROP_NODE"]
    modules = Path(os.environ["INTEROP_NODE_MODULES"])
    v1 = modules / "@modelcontextprotocol/inspector-cli/build/cli.js"
    v2 = modules / "@modelcontextprotocol/inspector/clients/launcher/build/index.js"
    t = load_tree(work)
    tree = Path(t["tree"])
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    env = {**os.environ, "MCP_CATALOG_PATH": str(work / "inspector-catalog.json"), "NO_COLOR": "1"}
    checks = Checks()
    n = [0]

    last = [Path("/nonexistent")]  # the log of the latest client run, shown when a check fails

    def run(version: int, ws: Path, method: list[str], profile: str = "full") -> tuple[int, Any]:
        n[0] += 1
        log = last[0] = logs / f"inspector-v{version}-{n[0]}.log"
        server = [binary, "stdio", "--workspace", str(ws), "--profile", profile]
        if version == 1:  # v1 bug: it must run from inside the install's node_modules
            argv, cwd = [node, str(v1), "--cli", *server, *method], modules
        else:
            argv, cwd = [node, str(v2), "--cli", "--format", "json", *server, *method], work
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=CALL_TIMEOUT, check=False)
        # ajv's notes on the "uint"/"uint64" formats of our schemas (harmless) would bury the rest
        stderr = [line for line in p.stderr.splitlines() if not line.startswith("unknown format ")]
        log.write_text("$ " + " ".join(argv) + "\n" + "\n".join(stderr) +
                       f"\n--- exit {p.returncode}; stdout:\n{short(p.stdout, 3000)}\n")
        try:
            out = json.loads(p.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"exit {p.returncode}, stdout is not JSON: {short(p.stdout, 200)}") from None
        return p.returncode, out

    def v(version: int, ws: Path, method: list[str], profile: str = "full", want_rc: int = 0) -> Any:
        rc, out = run(version, ws, method, profile)
        check(rc == want_rc, f"exit code {rc}, want {want_rc}")
        if version == 2 and "result" in out:
            out = out["result"]
        return out

    def tool(name: str, **args: Any) -> list[str]:
        out = ["--method", "tools/call", "--tool-name", name]
        if args:
            out.append("--tool-arg")
            out += [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in args.items()]
        return out

    def tools_list(version: int) -> Callable[[], None]:
        def go() -> None:
            out = v(version, tree, ["--method", "tools/list"] + (["--strict"] if version == 2 else []))
            names = {x["name"] for x in out["tools"]}
            check(names == TOOLS, f"tools {sorted(names)}, want {sorted(TOOLS)}")
        return go

    def read_range() -> None:
        out = v(1, tree, tool("read_file", path=t["read"], start_line=10, end_line=20))
        check_read(tree, t["read"], 10, 20, structured(out))

    def search_literal() -> None:
        out = v(1, tree, tool("search_text", pattern=LITERAL, literal=True, max_matches=20))
        check_matches(tree, structured(out), lambda line: LITERAL in line, "literal search")

    def search_regex() -> None:
        rx = re.compile(REGEX)
        out = v(2, tree, tool("search_text", pattern=REGEX, path=t["regex_crate"]))
        check_matches(tree, structured(out), lambda line: bool(rx.search(line)), "regex search", under=t["regex_crate"])

    def edit(version: int) -> Callable[[], None]:
        def go() -> None:
            ws = edit_copy(work, t, f"inspector-v{version}")
            e = t["edit"]
            before = (ws / e["path"]).read_text()
            args = {"path": e["path"], "old_text": e["old"], "new_text": e["old"] + EDIT_SUFFIX}
            if version == 1:
                out = v(1, ws, tool("edit_file", **args))
            else:  # v2 can pass the arguments verbatim as JSON
                out = v(2, ws, ["--method", "tools/call", "--tool-name", "edit_file",
                                "--tool-args-json", json.dumps(args)])
            check_edit(ws, e, before, structured(out))
        return go

    def boundary(version: int) -> Callable[[], None]:
        def go() -> None:
            # v1 exits 0 even for isError (only the JSON says so); v2 exits 5 (tool error)
            rc_want = 0 if version == 1 else 5
            out = v(version, tree, tool("read_file", path="../outside.txt"), "agent", want_rc=rc_want)
            check_boundary(out)
        return go

    (work / "outside.txt").write_text("secret\n")
    logf = lambda: [last[0]]  # noqa: E731
    checks.run(f"inspector-v1: tools/list has the {len(TOOLS)} tools", tools_list(1), logf)
    checks.run("inspector-v1: read_file line range", read_range, logf)
    checks.run("inspector-v1: search_text literal", search_literal, logf)
    checks.run("inspector-v1: edit_file on a copy", edit(1), logf)
    checks.run("inspector-v1: outside path is isError under --profile agent", boundary(1), logf)
    checks.run("inspector-v2: tools/list --strict (no schema portability errors)", tools_list(2), logf)
    checks.run("inspector-v2: search_text regex under a path", search_regex, logf)
    checks.run("inspector-v2: edit_file on a copy (--tool-args-json)", edit(2), logf)
    checks.run("inspector-v2: outside path exits 5 (tool error) under --profile agent", boundary(2), logf)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# conformance suite: judge one scenario

def cmd_conformance(name: str, rc: int, outdir: Path, logs: list[Path]) -> int:
    checks = Checks()

    def go() -> None:
        results = sorted(outdir.glob(f"server-{name}-*/checks.json"))
        check(results, f"suite exit {rc}, no checks.json for {name}")
        items = json.loads(results[-1].read_text())
        bad = [c for c in items if c.get("status") not in ("SUCCESS", "INFO")]
        check(items, "no checks ran")
        check(not bad and rc == 0, f"suite exit {rc}; " + "; ".join(
            f"{c.get('status')} {c.get('name')}: {c.get('errorMessage', '')}" for c in bad)[:2000])

    checks.run(f"conformance: {name}", go, lambda: logs)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# the relay (`machine-mcp up`): the conformance suite through it, and real clients over Streamable
# HTTP with a bearer token

# Scenarios of the active suite (@modelcontextprotocol/conformance 0.1.16).
ACTIVE_SCENARIOS = 30
# Expected failures we understand exactly: scenario -> (the one failing check, its HTTP status).
# dns-rebinding-protection sends its requests with undici directly, not through the global fetch
# the preloaded module wraps, so they carry no bearer token: the foreign Host/Origin request is
# still rejected (403, checked first), and the valid one gets 401 instead of a 2xx.
KNOWN_XFAIL = {"dns-rebinding-protection": ("localhost-host-valid-accepted", 401)}
# the tools --profile agent shows (no shell) and the ones each relay client must find
AGENT_TOOLS = TOOLS - {"exec_command"}
RELAY_TOOLS = {"read_file", "search_text", "edit_file", "run_process"}


def baseline_names(path: Path) -> list[str]:
    """The `server:` list of a suite baseline file (simple `- name` lines)."""
    names, in_server = [], False
    for line in path.read_text().splitlines():
        if line[:1].strip():
            in_server = line.startswith("server:")
        m = re.match(r"\s+-\s*['\"]?([^'\"#\s]+)", line)
        if in_server and m:
            names.append(m.group(1))
    return names


def cmd_conformance_suite(label: str, rc: int, outdir: Path, log: Path, baseline: Path | None,
                          extra_logs: list[Path]) -> int:
    """Judge one run of the whole active suite: one check for the run, one per scenario."""
    checks = Checks()
    xfail = set(baseline_names(baseline)) if baseline else set()
    text = log.read_text(errors="replace") if log.exists() else ""
    m = re.search(r"Running \w+ suite \((\d+) scenarios\)", text)
    ran = re.findall(r"^=== Running scenario: (\S+) ===", text, re.M)
    results: dict[str, list[dict[str, Any]] | None] = {}
    for name in ran:
        files = sorted(outdir.glob(f"server-{name}-*/checks.json"))
        results[name] = json.loads(files[-1].read_text()) if files else None
    logs = lambda: [log, *extra_logs]  # noqa: E731

    def bad_checks(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for c in items if c.get("status") not in ("SUCCESS", "INFO")]

    def describe(items: list[dict[str, Any]]) -> str:
        return "; ".join(f"{c.get('status')} {c.get('id') or c.get('name')}: {c.get('errorMessage', '')}"
                         for c in items)[:2000]

    def scenario(name: str) -> Callable[[], None]:
        def go() -> None:
            items = results[name]
            check(items, f"no checks.json for {name}")
            bad = bad_checks(items)
            if name not in xfail:
                check(not bad, describe(bad))
                return
            # an expected failure must fail, and (when we know why) for exactly that reason
            check(bad, f"XPASS: {name} is in the baseline {baseline} but passed (a stale entry fails the suite too)")
            if name in KNOWN_XFAIL:
                cid, status = KNOWN_XFAIL[name]
                got = [(c.get("id"), (c.get("details") or {}).get("statusCode")) for c in bad]
                check(got == [(cid, status)],
                      f"expected failure for another reason: want only {cid} with HTTP {status}; {describe(bad)}")
        return go

    def run() -> None:
        want = m and int(m.group(1))
        check(want == ACTIVE_SCENARIOS and len(ran) == ACTIVE_SCENARIOS,
              f"the suite announced {want} scenarios and ran {len(ran)}, want {ACTIVE_SCENARIOS} (exit {rc})")
        missing = [n for n, r in results.items() if r is None]
        check(not missing, f"no checks.json for {missing}")
        unexpected = [n for n, r in results.items() if r and bool(bad_checks(r)) != (n in xfail)]
        if not unexpected:  # the scenario checks say all is as expected: so must the suite
            check(rc == 0, f"suite exit {rc} although every scenario is as expected")

    what = f"all {ACTIVE_SCENARIOS} active scenarios ran" + (f", baseline {baseline.name}" if baseline else "")
    checks.run(f"{label}: {what}", run, logs)
    for name in ran:
        tag = " (expected failure: no bearer token on the suite's raw requests)" \
            if name in KNOWN_XFAIL and name in xfail else " (expected failure)" if name in xfail else ""
        checks.run(f"{label}: {name}{tag}", scenario(name), logs)
    return 1 if checks.failed else 0


def load_up(path: Path) -> dict[str, Any]:
    """The JSON line `machine-mcp up --json` printed."""
    return json.loads(path.read_text().splitlines()[0])


def relay_copy(edits: Path, t: dict[str, Any], client: str) -> tuple[Path, dict[str, Any]]:
    """A fresh copy of the edit target's crate at EDITS/CLIENT inside the edit `up`'s workspace;
    returns the workspace and the edit with its path relative to it."""
    dst = edits / client
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(Path(t["tree"]) / t["edit"]["crate"], dst, symlinks=True)
    return edits, {**t["edit"], "path": f"{client}/{t['edit']['path']}"}


def check_tools(names: set[str]) -> None:
    check(RELAY_TOOLS <= names, f"missing {sorted(RELAY_TOOLS - names)} in {sorted(names)}")
    check(names == AGENT_TOOLS, f"tools {sorted(names)}, want --profile agent's {sorted(AGENT_TOOLS)}")


def check_echo(sc: dict[str, Any]) -> None:
    check(sc.get("exit_code") == 0 and sc.get("stdout") == "hi\n" and sc.get("still_running") is False
          and sc.get("timed_out") is False, f"run_process echo hi: {short(sc)}")


def relay_plan(t: dict[str, Any]) -> dict[str, Any]:
    """The calls every relay client makes on the tree, by name."""
    return {
        "read": ("read_file", {"path": t["read"], "start_line": 5, "end_line": 25}),
        "search": ("search_text", {"pattern": LITERAL, "literal": True, "max_matches": 10}),
        "regex": ("search_text", {"pattern": REGEX, "path": t["regex_crate"], "max_matches": 10}),
        "echo": ("run_process", {"argv": ["echo", "hi"]}),
    }


def cmd_relay(client: str, work: Path, tree_up: Path, edit_up: Path) -> int:
    """Checks of one client (ts, python, inspector) against two `up --profile agent` with token
    auth: TREE_UP on the source tree, EDIT_UP on WORK/relay-edits (copies made here)."""
    t = load_tree(work)
    tree = Path(t["tree"])
    a, b = load_up(tree_up), load_up(edit_up)
    edits = work / "relay-edits"
    logs = work / "logs"
    up_logs = [tree_up.with_suffix(".log"), edit_up.with_suffix(".log")]
    plan = relay_plan(t)
    rx = re.compile(REGEX)
    checks = Checks()
    return {"ts": relay_ts, "python": relay_python, "inspector": relay_inspector}[client](
        checks, t, tree, a, b, edits, logs, up_logs, plan, rx)


def relay_ts(checks: Checks, t: dict[str, Any], tree: Path, a: dict[str, Any], b: dict[str, Any], edits: Path,
             logs: Path, up_logs: list[Path], plan: dict[str, Any], rx: re.Pattern[str]) -> int:
    node = os.environ["INTEROP_NODE"]
    modules = os.environ["INTEROP_NODE_MODULES"]
    script = Path(__file__).with_name("ts-client.mjs")

    def session(name: str, up: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        log = logs / f"relay-ts-{name}.log"
        stdin = json.dumps({"calls": [{"name": n, "arguments": args} for n, args in calls]})
        p = subprocess.run([node, str(script), modules, up["mcp_url"]], input=stdin, capture_output=True,
                           text=True, timeout=CALL_TIMEOUT * 2, check=False,
                           env={**os.environ, "INTEROP_TOKEN": up["token"]})
        log.write_text(f"$ node ts-client.mjs {modules} {up['mcp_url']}\nplan: {stdin}\n{p.stderr}\n"
                       f"--- exit {p.returncode}; stdout:\n{short(p.stdout, 6000)}\n")
        check(p.returncode == 0, f"ts-client.mjs exit {p.returncode}: {short(p.stderr.strip(), 600)}")
        return json.loads(p.stdout)

    names = ["read", "search", "echo"]
    out: dict[str, Any] = {}
    logf = lambda: [logs / "relay-ts-tree.log", *up_logs]  # noqa: E731

    def result(i: int) -> dict[str, Any]:
        check(out, "no session (see the initialize check)")
        r = out["results"][i]
        check("result" in r, f"the SDK threw: {r.get('error')}")
        return r["result"]

    def init() -> None:
        out.update(session("tree", a, [plan[n] for n in names]))
        check(out["protocol_version"] == "2025-11-25", f"negotiated {out['protocol_version']!r}, want 2025-11-25")
        check((out["server"] or {}).get("name") == "machine-mcp", f"serverInfo {out['server']}")
        check("tools" in (out["capabilities"] or {}), f"no tools capability: {out['capabilities']}")
        check(out["session_id"], "no MCP-Session-Id")

    def tools() -> None:
        check(out and not out.get("tools_error"), f"tools/list: {out.get('tools_error')}")
        check_tools({x["name"] for x in out["tools"]})

    checks.run("ts-sdk (relay): initialize (2025-11-25, serverInfo, session id)", init, logf)
    checks.run(f"ts-sdk (relay): tools/list is --profile agent's {len(AGENT_TOOLS)} tools", tools, logf)
    checks.run("ts-sdk (relay): read_file line range",
               lambda: check_read(tree, t["read"], 5, 25, structured(result(0))), logf)
    checks.run("ts-sdk (relay): search_text literal",
               lambda: check_matches(tree, structured(result(1)), lambda line: LITERAL in line, "literal search"), logf)
    checks.run("ts-sdk (relay): run_process [echo, hi]", lambda: check_echo(structured(result(2))), logf)
    checks.run("ts-sdk (relay): DELETE ends the session",
               lambda: check(out and out["terminated"] is True, f"terminateSession: {out.get('terminated')}"), logf)

    def edit() -> None:
        ws, e = relay_copy(edits, t, "ts")
        before = (ws / e["path"]).read_text()
        o = session("edit", b, [("edit_file", {"path": e["path"], "old_text": e["old"],
                                               "new_text": e["old"] + EDIT_SUFFIX})])
        r = o["results"][0]
        check("result" in r, f"the SDK threw: {r.get('error')}")
        check_edit(ws, e, before, structured(r["result"]))

    checks.run("ts-sdk (relay): edit_file on a copy", edit, lambda: [logs / "relay-ts-edit.log", *up_logs])
    return 1 if checks.failed else 0


def relay_python(checks: Checks, t: dict[str, Any], tree: Path, a: dict[str, Any], b: dict[str, Any], edits: Path,
                 logs: Path, up_logs: list[Path], plan: dict[str, Any], rx: re.Pattern[str]) -> int:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    log = logs / "relay-python.log"
    logf = lambda: [log, *up_logs]  # noqa: E731

    def session(up: dict[str, Any], mode: str = "legacy", wire: list[str] | None = None):
        def runner(body: Callable[[Any], Any]) -> Callable[[], None]:
            def go() -> None:
                async def record(response: Any) -> None:  # method of each POST and its status
                    req = response.request
                    method = json.loads(req.content).get("method", "(response)") if req.content else "-"
                    line = f"{req.method} {method} -> {response.status_code}"
                    with open(log, "a") as f:
                        f.write(line + "\n")
                    if wire is not None:
                        wire.append(line)

                async def main() -> None:
                    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {up['token']}"},
                                              timeout=httpx2.Timeout(CALL_TIMEOUT, read=300),
                                              event_hooks={"response": [record]})
                    with anyio.fail_after(CALL_TIMEOUT):
                        async with http, Client(streamable_http_client(up["mcp_url"], http_client=http),
                                                mode=mode, read_timeout_seconds=CALL_TIMEOUT) as c:
                            await body(c)
                anyio.run(main)
            return go
        return runner

    async def call(c: Any, name: str) -> dict[str, Any]:
        tool, args = plan[name]
        return structured(res(await c.call_tool(tool, args)))

    async def basics(c: Any) -> None:
        check(c.protocol_version == "2025-11-25", f"negotiated {c.protocol_version!r}, want 2025-11-25")
        check(c.server_info and c.server_info.name == "machine-mcp", f"serverInfo {c.server_info!r}")
        check(c.server_capabilities.tools is not None, "no tools capability")

    async def tools(c: Any) -> None:
        check_tools({x.name for x in (await c.list_tools()).tools})

    async def read(c: Any) -> None:
        check_read(tree, t["read"], 5, 25, await call(c, "read"))

    async def regex(c: Any) -> None:
        check_matches(tree, await call(c, "regex"), lambda line: bool(rx.search(line)), "regex search",
                      under=t["regex_crate"])

    async def echo(c: Any) -> None:
        check_echo(await call(c, "echo"))

    checks.run("python-sdk (relay): initialize (legacy mode)", session(a)(basics), logf)
    checks.run(f"python-sdk (relay): tools/list is --profile agent's {len(AGENT_TOOLS)} tools", session(a)(tools), logf)
    checks.run("python-sdk (relay): read_file line range", session(a)(read), logf)
    checks.run("python-sdk (relay): search_text regex under a path", session(a)(regex), logf)
    checks.run("python-sdk (relay): run_process [echo, hi]", session(a)(echo), logf)

    ws, e = relay_copy(edits, t, "python")
    before = (ws / e["path"]).read_text()

    async def edit(c: Any) -> None:
        args = {"path": e["path"], "old_text": e["old"], "new_text": e["old"] + EDIT_SUFFIX}
        check_edit(ws, e, before, structured(res(await c.call_tool("edit_file", args))))

    checks.run("python-sdk (relay): edit_file on a copy", session(b)(edit), logf)

    wire: list[str] = []

    async def auto(c: Any) -> None:
        check(c.protocol_version == "2026-07-28", f"negotiated {c.protocol_version!r}, want 2026-07-28")
        check(c.session.initialize_result is None, "an initialize result: the client fell back")
        check_echo(await call(c, "echo"))
        posts = [w for w in wire if w.startswith("POST ")]
        check(posts and posts[0] == "POST server/discover -> 200" and not any(" initialize " in w for w in posts),
              f"wire {posts[:3]}, want server/discover answered (200) and no initialize")

    checks.run("python-sdk (relay): default mode (server/discover answered: 2026-07-28, no initialize)",
               session(a, "auto", wire)(auto), logf)
    return 1 if checks.failed else 0


def relay_inspector(checks: Checks, t: dict[str, Any], tree: Path, a: dict[str, Any], b: dict[str, Any],
                    edits: Path, logs: Path, up_logs: list[Path], plan: dict[str, Any], rx: re.Pattern[str]) -> int:
    node = os.environ["INTEROP_NODE"]
    modules = Path(os.environ["INTEROP_NODE_MODULES"])
    v1 = modules / "@modelcontextprotocol/inspector-cli/build/cli.js"
    v2 = modules / "@modelcontextprotocol/inspector/clients/launcher/build/index.js"
    work = logs.parent
    env = {**os.environ, "MCP_CATALOG_PATH": str(work / "inspector-catalog.json"), "NO_COLOR": "1"}
    n = [0]
    last = [Path("/nonexistent")]

    def run(version: int, up: dict[str, Any], method: list[str], want_rc: int = 0) -> Any:
        n[0] += 1
        log = last[0] = logs / f"relay-inspector-v{version}-{n[0]}.log"
        # the URL first: --header takes several values and would swallow it
        target = [up["mcp_url"], "--transport", "http", "--header", f"Authorization: Bearer {up['token']}"]
        if version == 1:  # v1 bug: it must run from inside the install's node_modules
            argv, cwd = [node, str(v1), "--cli", *target, *method], modules
        else:
            argv, cwd = [node, str(v2), "--cli", "--format", "json", *target, *method], work
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=CALL_TIMEOUT, check=False)
        stderr = [line for line in p.stderr.splitlines() if not line.startswith("unknown format ")]
        shown = " ".join(argv).replace(up["token"], "<token>")
        log.write_text(f"$ {shown}\n" + "\n".join(stderr) + f"\n--- exit {p.returncode}; stdout:\n{short(p.stdout, 3000)}\n")
        try:
            out = json.loads(p.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"exit {p.returncode}, stdout is not JSON: {short(p.stdout, 200)}") from None
        check(p.returncode == want_rc, f"exit code {p.returncode}, want {want_rc}: {short(out, 300)}")
        return out.get("result", out) if version == 2 else out

    def tool(name: str, args: dict[str, Any]) -> list[str]:
        return ["--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(args)]

    def v1_tool(name: str, args: dict[str, Any]) -> list[str]:
        return ["--method", "tools/call", "--tool-name", name, "--tool-arg",
                *[f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in args.items()]]

    def tools(version: int) -> Callable[[], None]:
        def go() -> None:
            out = run(version, a, ["--method", "tools/list"] + (["--strict"] if version == 2 else []))
            check_tools({x["name"] for x in out["tools"]})
        return go

    def edit() -> None:
        ws, e = relay_copy(edits, t, "inspector")
        before = (ws / e["path"]).read_text()
        out = run(2, b, tool("edit_file", {"path": e["path"], "old_text": e["old"], "new_text": e["old"] + EDIT_SUFFIX}))
        check_edit(ws, e, before, structured(out))

    logf = lambda: [last[0], *up_logs]  # noqa: E731
    checks.run(f"inspector-v2 (relay): initialize + tools/list --strict is --profile agent's {len(AGENT_TOOLS)} tools",
               tools(2), logf)
    checks.run("inspector-v2 (relay): read_file line range",
               lambda: check_read(tree, t["read"], 5, 25, structured(run(2, a, tool(*plan["read"])))), logf)
    checks.run("inspector-v2 (relay): search_text literal",
               lambda: check_matches(tree, structured(run(2, a, tool(*plan["search"]))),
                                     lambda line: LITERAL in line, "literal search"), logf)
    checks.run("inspector-v2 (relay): run_process [echo, hi]",
               lambda: check_echo(structured(run(2, a, tool(*plan["echo"])))), logf)
    checks.run("inspector-v2 (relay): edit_file on a copy", edit, logf)
    checks.run(f"inspector-v1 (relay): tools/list is --profile agent's {len(AGENT_TOOLS)} tools", tools(1), logf)
    checks.run("inspector-v1 (relay): run_process [echo, hi] (--tool-arg argv=JSON)",
               lambda: check_echo(structured(run(1, a, v1_tool(*plan["echo"])))), logf)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# tee: a transparent stdio relay that records the JSON-RPC lines in both directions

def cmd_tee(log: Path, cmd: list[str]) -> int:
    out = open(log, "w", buffering=1)
    lock = threading.Lock()
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def record(prefix: str, line: bytes) -> None:
        with lock:
            out.write(prefix + line.decode(errors="replace").rstrip("\n") + "\n")

    def pump_in() -> None:
        assert child.stdin
        for line in sys.stdin.buffer:
            record("> ", line)
            try:
                child.stdin.write(line)
                child.stdin.flush()
            except BrokenPipeError:
                break
        child.stdin.close()

    threading.Thread(target=pump_in, daemon=True).start()
    assert child.stdout
    for line in child.stdout:
        record("< ", line)
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return child.wait()


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "tree":
        return cmd_tree(Path(argv[1]))
    if len(argv) == 3 and argv[0] == "sdk":
        return cmd_sdk(Path(argv[1]), argv[2])
    if len(argv) == 3 and argv[0] == "inspector":
        return cmd_inspector(Path(argv[1]), argv[2])
    if len(argv) >= 4 and argv[0] == "conformance":
        return cmd_conformance(argv[1], int(argv[2]), Path(argv[3]), [Path(p) for p in argv[4:]])
    if len(argv) >= 6 and argv[0] == "conformance-suite":
        baseline = Path(argv[5]) if argv[5] else None
        return cmd_conformance_suite(argv[1], int(argv[2]), Path(argv[3]), Path(argv[4]), baseline,
                                     [Path(p) for p in argv[6:]])
    if len(argv) == 5 and argv[0] == "relay" and argv[1] in ("ts", "python", "inspector"):
        return cmd_relay(argv[1], Path(argv[2]), Path(argv[3]), Path(argv[4]))
    if len(argv) >= 4 and argv[0] == "tee" and argv[2] == "--":
        return cmd_tee(Path(argv[1]), argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
