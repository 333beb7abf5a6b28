#!/usr/bin/env python3
"""MCP 2026-07-28 checks for tests/interop/run.sh: real clients forced to the new era (no fallback
to `initialize`), against `machine-mcp stdio`, the conformance fixture on stdio, and through
`machine-mcp up` (the built-in runtime at /b/{bridge}/mcp and carried upstreams at
/b/{bridge}/s/{server}/mcp).

Subcommands (each check prints `PASS <name>` or `FAIL <name>: <why>`, as interop.py's do):

  stdio python|ts|raw WORK BIN FIXTURE
        python: the Python `mcp` SDK (`Client(..., mode="2026-07-28")`), ts: the TypeScript client
        2.x (ts-client-2026.mjs, env INTEROP_NODE and INTEROP_NODE_MODULES), each against
        `BIN stdio` and the fixture FIXTURE on stdio; raw: server/discover, then initialize
        2025-11-25, then tools/list on one stdio connection (as Copilot CLI does)
  relay python|ts WORK TREE_UP EDIT_UP
        the same clients through two `up --profile agent --json` (their JSON lines): TREE_UP
        serves WORK/tree and carries the fixture twice (`conformance`: both eras; `legacy`:
        `--legacy-only`, which the daemon has to bridge), EDIT_UP serves WORK/relay-edits
  conformance fixture|runtime|stdio LABEL RC OUTDIR LOG [LOG...]
        judge one run of the conformance suite's 2026-07-28 requirement set (0.2.0-alpha.12,
        `server --requirements 2026-07-28`) against the fixture, the daemon's built-in runtime or
        `machine-mcp stdio` carried by `up`: every failing check must be one listed for the target
        in _expected() (untestable there, or a known product bug, tagged as such), and every
        listed one must fail

What each client does against the built-in runtime: `server/discover` (2026-07-28 offered, server
info), `tools/list`, `read_file`, `search_text`, `edit_file` on a copy (checked on disk), a
`run_process` that outlives the 3 s foreground budget and so becomes a task (the client declares
the tasks extension, SEP-2663), polled with `tasks/get` to its result, a second one cancelled with
`tasks/cancel` whose process tree (a shell and its `sleep` child, pids written to a file in the
workspace) must be gone afterwards, and `subscriptions/listen` acknowledged. Against the fixture
(directly on stdio, or carried through `up`): discover, `tools/list`, `test_simple_text`, and
`subscriptions/listen` receiving the `notifications/tools/list_changed` that the fixture's
`test_tool_list_changed` emits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from interop import (
    AGENT_TOOLS, CALL_TIMEOUT, EDIT_SUFFIX, LITERAL, REGEX, TOOLS, Checks, check, check_edit,
    check_matches, check_read, edit_copy, load_tree, load_up, relay_copy, res, short, structured,
)

VERSION = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}
# a run_process that outlives the runtime's 3 s foreground budget (so it becomes a task) and ends
SLOW = ["sh", "-c", "sleep 5; echo done"]
TASK_SECS = 60  # the longest a task may take to reach a terminal status
GONE_SECS = 10  # how long a cancelled task's processes may take to go away
FIXTURE_TOOLS = {"test_simple_text", "test_tool_list_changed"}
PIDS = "task-pids.txt"


def slow_tree(pidfile: Path) -> list[str]:
    """argv of a process tree that writes its pids (the shell's and its sleep child's) and then
    waits: what a cancelled task must take down with it."""
    return ["sh", "-c", f"sleep 60 & echo $$ $! > {pidfile}; wait"]


def meta() -> dict[str, Any]:
    """The complete per-request `_meta` of a 2026-07-28 request (spec basic/index)."""
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "machine-mcp-interop-raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }


# ---------------------------------------------------------------------------------------------
# result checks shared by both clients (plain JSON)

def check_discover(d: Any, name: str) -> None:
    check(isinstance(d, dict), f"no discover result: {short(d)}")
    check(VERSION in (d.get("supportedVersions") or []), f"supportedVersions lacks {VERSION}: {short(d)}")
    info = (d.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo") or d.get("serverInfo") or {}
    check(info.get("name") == name, f"server info {short(info)}, want name {name!r}")
    check("tools" in (d.get("capabilities") or {}), f"no tools capability: {short(d.get('capabilities'))}")


def check_honored(honored: dict[str, Any], tools_cap: dict[str, Any]) -> None:
    """A listen acknowledgement for {toolsListChanged}: it may honour less than asked (a server
    whose tool list never changes honours nothing), but not less than the server advertises."""
    check(set(honored) <= {"toolsListChanged"}, f"honored {honored}: more than was asked")
    if tools_cap.get("listChanged"):
        check(honored.get("toolsListChanged") is True, f"honored {honored}, but tools.listChanged is advertised")


def pids_of(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as gone: it has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def check_gone(pidfile: Path) -> None:
    pids = pids_of(pidfile)
    check(len(pids) == 2, f"{pidfile.name} holds {pids}, want the shell's and its child's pid")
    deadline = time.monotonic() + GONE_SECS
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    check(not left, f"still running {GONE_SECS}s after tasks/cancel: pids {left} of {pids}")


def check_done(sc: dict[str, Any]) -> None:
    check(sc.get("exit_code") == 0 and sc.get("stdout") == "done\n" and sc.get("still_running") is False,
          f"run_process {SLOW}: {short(sc)}")


# ---------------------------------------------------------------------------------------------
# Python SDK

def python_tasks_extension() -> Any:
    """The tasks extension (SEP-2663) as a client extension of the Python SDK: it declares
    `io.modelcontextprotocol/tasks` in every request's capabilities and claims `resultType:
    "task"` on tools/call, resolving it by polling `tasks/get` (honouring pollIntervalMs) to the
    final CallToolResult. The SDK has the extension points (ClientExtension, ResultClaim) but
    ships no tasks client; `created` and `polls` record what happened, for the checks."""
    from typing import Literal

    import anyio
    import mcp_types as types
    from mcp.client import ClientExtension, ResultClaim
    from pydantic import ConfigDict

    class TaskIdParams(types.RequestParams):
        task_id: str

    class TasksGet(types.Request[TaskIdParams, Literal["tasks/get"]]):
        method: Literal["tasks/get"] = "tasks/get"
        params: TaskIdParams
        name_param = "taskId"  # SEP-2663: Mcp-Name mirrors params.taskId on HTTP

    class TasksCancel(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
        method: Literal["tasks/cancel"] = "tasks/cancel"
        params: TaskIdParams
        name_param = "taskId"

    class TaskState(types.Result):
        model_config = ConfigDict(extra="allow")
        result_type: str | None = None
        task_id: str
        status: str
        poll_interval_ms: int | None = None
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None

    class CreateTaskResult(types.Result):
        model_config = ConfigDict(extra="allow")
        result_type: Literal["task"] = "task"
        task_id: str
        status: str
        poll_interval_ms: int | None = None

    class Tasks(ClientExtension):
        identifier = TASKS_EXT

        def __init__(self) -> None:
            self.created: list[dict[str, Any]] = []
            self.polls: list[str] = []
            self.get, self.cancel_request, self.state = TasksGet, TasksCancel, TaskState

        def claims(self) -> Any:
            return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

        async def poll(self, session: Any, task_id: str, interval: int | None, limit: float) -> Any:
            state = None
            with anyio.fail_after(limit):
                while state is None or state.status not in TERMINAL:
                    await anyio.sleep(min(1.0, max(0.1, (interval or 500) / 1000)))
                    state = await session.send_request(TasksGet(params=TaskIdParams(task_id=task_id)), TaskState)
                    interval = state.poll_interval_ms or interval
                    self.polls.append(state.status)
            return state

        async def resolve(self, created: Any, ctx: Any) -> Any:
            self.created.append(created.model_dump(mode="json", by_alias=True, exclude_none=True))
            state = await self.poll(ctx.session, created.task_id, created.poll_interval_ms, TASK_SECS)
            check(state.status == "completed", f"task ended {state.status}: {short(state.model_dump(by_alias=True))}")
            return types.CallToolResult.model_validate(state.result)

        async def cancel(self, session: Any, task_id: str) -> Any:
            return await session.send_request(TasksCancel(params=TaskIdParams(task_id=task_id)), TaskState.__base__)

    return Tasks()


def python_session(target: dict[str, Any], log: Path, ext: Any = None) -> Callable[[Callable[[Any], Any]], Callable[[], None]]:
    """session(target)(body): run `body(client)` in a fresh Python SDK client at 2026-07-28,
    target {"stdio": [argv]} or {"url", "token"}."""
    import anyio
    from mcp import Client

    def runner(body: Callable[[Any], Any]) -> Callable[[], None]:
        def go() -> None:
            async def main() -> None:
                with open(log, "a") as errlog, anyio.fail_after(CALL_TIMEOUT + TASK_SECS):
                    extensions = [ext] if ext is not None else None
                    if "stdio" in target:
                        from mcp.client.stdio import StdioServerParameters, stdio_client
                        argv = target["stdio"]
                        server: Any = stdio_client(StdioServerParameters(command=argv[0], args=argv[1:]), errlog=errlog)
                        async with Client(server, mode=VERSION, extensions=extensions,
                                          read_timeout_seconds=CALL_TIMEOUT) as c:
                            await body(c)
                    else:
                        import httpx2
                        from mcp.client.streamable_http import streamable_http_client
                        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {target['token']}"},
                                                  timeout=httpx2.Timeout(CALL_TIMEOUT, read=300))
                        async with http, Client(streamable_http_client(target["url"], http_client=http), mode=VERSION,
                                                extensions=extensions, read_timeout_seconds=CALL_TIMEOUT) as c:
                            await body(c)
            anyio.run(main)
        return go
    return runner


def python_checks(checks: Checks, label: str, tree: Path, t: dict[str, Any], reads: dict[str, Any],
                  edits: dict[str, Any], edit_ws: Path, edit: dict[str, Any], want_tools: set[str],
                  fixtures: list[tuple[str, dict[str, Any]]], logs: Path, extra_logs: list[Path]) -> None:
    """The Python SDK at 2026-07-28: `reads` = the target serving the tree, `edits` = the target
    serving `edit_ws` (where the edit copy and the task pid files go), `fixtures` = (name,
    target) of fixture servers."""
    import anyio

    log = logs / f"modern-python-{label}.log"
    logf = lambda: [log, *extra_logs]  # noqa: E731
    name = f"python-sdk 2026-07-28 ({label})"

    async def discover(c: Any) -> None:
        check(c.protocol_version == VERSION, f"protocol {c.protocol_version!r}, want {VERSION}")
        check(c.session.initialize_result is None, "an initialize result: the client fell back")
        check_discover(await c.session.send_discover(VERSION), "machine-mcp")

    async def tools(c: Any) -> None:
        names = {x.name for x in (await c.list_tools()).tools}
        check(names == want_tools, f"tools {sorted(names)}, want {sorted(want_tools)}")

    async def read(c: Any) -> None:
        check_read(tree, t["read"], 5, 25, structured(res(await c.call_tool(
            "read_file", {"path": t["read"], "start_line": 5, "end_line": 25}))))

    async def search(c: Any) -> None:
        sc = structured(res(await c.call_tool("search_text", {"pattern": LITERAL, "literal": True, "max_matches": 10})))
        check_matches(tree, sc, lambda line: LITERAL in line, "literal search")

    async def do_edit(c: Any) -> None:
        before = (edit_ws / edit["path"]).read_text()
        args = {"path": edit["path"], "old_text": edit["old"], "new_text": edit["old"] + EDIT_SUFFIX}
        check_edit(edit_ws, edit, before, structured(res(await c.call_tool("edit_file", args))))

    async def listen_ack(c: Any) -> None:
        advertised = (await c.session.send_discover(VERSION)).get("capabilities", {}).get("tools", {})
        with anyio.fail_after(CALL_TIMEOUT):
            async with c.listen(tools_list_changed=True) as sub:
                check(sub.honored is not None, "no acknowledgement")
                check_honored(res(sub.honored), advertised)

    checks.run(f"{name}: server/discover (no initialize)", python_session(reads, log)(discover), logf)
    checks.run(f"{name}: tools/list", python_session(reads, log)(tools), logf)
    checks.run(f"{name}: read_file line range", python_session(reads, log)(read), logf)
    checks.run(f"{name}: search_text literal", python_session(reads, log)(search), logf)
    checks.run(f"{name}: edit_file on a copy", python_session(edits, log)(do_edit), logf)
    checks.run(f"{name}: subscriptions/listen acknowledged (as advertised)", python_session(reads, log)(listen_ack),
               logf)

    ext = python_tasks_extension()

    async def task(c: Any) -> None:
        r = await c.call_tool("run_process", {"argv": SLOW}, read_timeout_seconds=CALL_TIMEOUT)
        check(ext.created, f"run_process {SLOW} did not become a task: {short(res(r))}")
        check(ext.created[0].get("resultType") == "task" and ext.created[0].get("status") == "working",
              f"CreateTaskResult {short(ext.created[0])}")
        check(ext.polls and ext.polls[-1] == "completed", f"tasks/get statuses {ext.polls}")
        check_done(structured(res(r)))

    checks.run(f"{name}: run_process past the foreground budget becomes a task, tasks/get to its result",
               python_session(edits, log, ext)(task), logf)

    pidfile = edit_ws / f"python-{label.replace(' ', '-')}-{PIDS}"
    ext2 = python_tasks_extension()

    async def cancel(c: Any) -> None:
        rel = pidfile.name
        created = await c.session.call_tool("run_process", {"argv": slow_tree(Path(rel))}, allow_claimed=True)
        check(getattr(created, "result_type", None) == "task", f"not a task: {short(res(created))}")
        deadline = time.monotonic() + 15
        while len(pids_of(pidfile)) < 2 and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        await ext2.cancel(c.session, created.task_id)
        state = await ext2.poll(c.session, created.task_id, 200, 15)
        check(state.status == "cancelled", f"status after tasks/cancel: {state.status}")
        check_gone(pidfile)

    checks.run(f"{name}: tasks/cancel ends the task and its process tree", python_session(edits, log, ext2)(cancel), logf)

    for fname, target in fixtures:
        fxname = f"python-sdk 2026-07-28 ({label}, fixture {fname})"

        async def fx_basics(c: Any) -> None:
            check(c.session.initialize_result is None, "an initialize result: the client fell back")
            check_discover(await c.session.send_discover(VERSION), "conformance-fixture")
            names = {x.name for x in (await c.list_tools()).tools}
            check(FIXTURE_TOOLS <= names, f"tools {sorted(names)} lack {sorted(FIXTURE_TOOLS - names)}")
            r = res(await c.call_tool("test_simple_text", {}))
            check(r.get("content", [{}])[0].get("text") == "This is a simple text response for testing.", short(r))

        async def fx_listen(c: Any) -> None:
            from mcp.client.subscriptions import ToolsListChanged
            with anyio.fail_after(CALL_TIMEOUT):
                async with c.listen(tools_list_changed=True) as sub:
                    check(sub.honored.tools_list_changed, f"toolsListChanged not honored: {sub.honored}")
                    await c.call_tool("test_tool_list_changed", {})
                    with anyio.fail_after(10):
                        event = await sub.__anext__()
                    check(isinstance(event, ToolsListChanged), f"event {event!r}")

        checks.run(f"{fxname}: discover, tools/list, test_simple_text", python_session(target, log)(fx_basics), logf)
        checks.run(f"{fxname}: subscriptions/listen receives notifications/tools/list_changed",
                   python_session(target, log)(fx_listen), logf)


# ---------------------------------------------------------------------------------------------
# TypeScript client 2.x (ts-client-2026.mjs)

def ts_run(target: dict[str, Any], steps: list[dict[str, Any]], log: Path) -> dict[str, Any]:
    node = os.environ["INTEROP_NODE"]
    modules = os.environ["INTEROP_NODE_MODULES"]
    script = Path(__file__).with_name("ts-client-2026.mjs")
    plan = {"target": target, "tasks": True, "steps": steps}
    p = subprocess.run([node, str(script), modules], input=json.dumps(plan), capture_output=True, text=True,
                       timeout=CALL_TIMEOUT + 2 * TASK_SECS, check=False)
    shown = json.dumps(plan).replace(target.get("token") or "\0", "<token>")
    with open(log, "a") as f:
        f.write(f"$ node ts-client-2026.mjs {modules}\nplan: {shown}\n{p.stderr}\n"
                f"--- exit {p.returncode}; stdout:\n{short(p.stdout, 8000)}\n")
    check(p.returncode == 0, f"ts-client-2026.mjs exit {p.returncode}: {short(p.stderr.strip(), 600)}")
    return json.loads(p.stdout)


def ts_checks(checks: Checks, label: str, tree: Path, t: dict[str, Any], reads: dict[str, Any],
              edits: dict[str, Any], edit_ws: Path, edit: dict[str, Any], want_tools: set[str],
              fixtures: list[tuple[str, dict[str, Any]]], logs: Path, extra_logs: list[Path]) -> None:
    log = logs / f"modern-ts-{label}.log"
    logf = lambda: [log, *extra_logs]  # noqa: E731
    name = f"ts-client 2.x 2026-07-28 ({label})"
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    pidfile = edit_ws / f"ts-{label.replace(' ', '-')}-{PIDS}"

    def step(o: dict[str, Any], i: int) -> dict[str, Any]:
        check(o, "no session (see the discover check)")
        s = o["steps"][i]
        check("error" not in s, f"the client threw: {s.get('error')} {short(s.get('data') or '')}")
        return s

    def connect_a() -> None:
        a.update(ts_run(reads, [
            {"op": "tools"},
            {"op": "call", "name": "read_file", "arguments": {"path": t["read"], "start_line": 5, "end_line": 25}},
            {"op": "call", "name": "search_text", "arguments": {"pattern": LITERAL, "literal": True, "max_matches": 10}},
        ], log))
        check(a["protocol_version"] == VERSION, f"protocol {a['protocol_version']!r}, want {VERSION}")
        check_discover(a["discover"], "machine-mcp")

    def tools() -> None:
        names = {x["name"] for x in step(a, 0)["tools"]}
        check(names == want_tools, f"tools {sorted(names)}, want {sorted(want_tools)}")

    checks.run(f"{name}: server/discover at connect (pinned, no fallback)", connect_a, logf)
    checks.run(f"{name}: tools/list", tools, logf)
    checks.run(f"{name}: read_file line range",
               lambda: check_read(tree, t["read"], 5, 25, structured(step(a, 1)["result"])), logf)
    checks.run(f"{name}: search_text literal",
               lambda: check_matches(tree, structured(step(a, 2)["result"]), lambda line: LITERAL in line,
                                     "literal search"), logf)

    before = (edit_ws / edit["path"]).read_text()

    def connect_b() -> None:
        b.update(ts_run(edits, [
            {"op": "call", "name": "edit_file",
             "arguments": {"path": edit["path"], "old_text": edit["old"], "new_text": edit["old"] + EDIT_SUFFIX}},
            {"op": "task", "name": "run_process", "arguments": {"argv": SLOW}},
            {"op": "task_cancel", "name": "run_process", "arguments": {"argv": slow_tree(Path(pidfile.name))},
             "wait_file": str(pidfile)},
            {"op": "listen", "trigger": {"name": "server_info", "arguments": {}}, "wait_ms": 0},
        ], log))
        check_edit(edit_ws, edit, before, structured(step(b, 0)["result"]))

    def task() -> None:
        s = step(b, 1)
        check(s["created"].get("resultType") == "task" and s["created"].get("status") == "working",
              f"run_process {SLOW} did not become a task: {short(s['created'])}")
        check(s["final"].get("status") == "completed", f"final task {short(s['final'])} (statuses {s['polls']})")
        check_done(structured(s["final"]["result"]))

    def cancel() -> None:
        s = step(b, 2)
        check(s["created"].get("resultType") == "task", f"not a task: {short(s['created'])}")
        check(s["final"].get("status") == "cancelled", f"status after tasks/cancel: {short(s['final'])}")
        check_gone(pidfile)

    def listen() -> None:
        s = step(b, 3)
        check_honored(s["honored"], (b["discover"].get("capabilities") or {}).get("tools") or {})

    checks.run(f"{name}: edit_file on a copy", connect_b, logf)
    checks.run(f"{name}: run_process past the foreground budget becomes a task, tasks/get to its result", task, logf)
    checks.run(f"{name}: tasks/cancel ends the task and its process tree", cancel, logf)
    checks.run(f"{name}: subscriptions/listen acknowledged (as advertised)", listen, logf)

    for fname, target in fixtures:
        fxname = f"ts-client 2.x 2026-07-28 ({label}, fixture {fname})"
        o: dict[str, Any] = {}

        def fx_basics(o: dict[str, Any] = o, target: dict[str, Any] = target) -> None:
            o.update(ts_run(target, [
                {"op": "tools"},
                {"op": "call", "name": "test_simple_text", "arguments": {}},
                {"op": "listen", "trigger": {"name": "test_tool_list_changed", "arguments": {}}},
            ], log))
            check(o["protocol_version"] == VERSION, f"protocol {o['protocol_version']!r}")
            check_discover(o["discover"], "conformance-fixture")
            names = {x["name"] for x in step(o, 0)["tools"]}
            check(FIXTURE_TOOLS <= names, f"tools {sorted(names)} lack {sorted(FIXTURE_TOOLS - names)}")
            r = step(o, 1)["result"]
            check(r["content"][0].get("text") == "This is a simple text response for testing.", short(r))

        def fx_listen(o: dict[str, Any] = o) -> None:
            s = step(o, 2)
            check(s["honored"].get("toolsListChanged") is True, f"honored filter {s['honored']}")
            check(s["received"], f"no notifications/tools/list_changed within 10 s (trigger: {short(s['trigger'])})")

        checks.run(f"{fxname}: discover, tools/list, test_simple_text", fx_basics, logf)
        checks.run(f"{fxname}: subscriptions/listen receives notifications/tools/list_changed", fx_listen, logf)


# ---------------------------------------------------------------------------------------------
# raw: discover, then initialize, on one stdio connection

def raw_checks(checks: Checks, tree: Path, binary: str, logs: Path) -> None:
    log = logs / "modern-raw.log"

    def go() -> None:
        p = subprocess.Popen([binary, "stdio", "--workspace", str(tree)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=open(log, "a"), text=True)
        assert p.stdin and p.stdout
        sent = [
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}},
            {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "machine-mcp-interop-raw", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}},
        ]
        got: dict[int, Any] = {}
        try:
            for m in sent:
                p.stdin.write(json.dumps(m) + "\n")
                p.stdin.flush()
                if "id" not in m:
                    continue
                while m["id"] not in got:  # answers in order of the requests (each awaited)
                    line = p.stdout.readline()
                    check(line, f"stdout closed before the answer to {m['method']}")
                    with open(log, "a") as f:
                        f.write("< " + line)
                    msg = json.loads(line)
                    if "id" in msg and "method" not in msg:
                        got[msg["id"]] = msg
        finally:
            p.stdin.close()
            p.wait(10)
        check("result" in got[1], f"server/discover: {short(got[1])}")
        check_discover(got[1]["result"], "machine-mcp")
        check(got[2].get("result", {}).get("protocolVersion") == "2025-11-25", f"initialize: {short(got[2])}")
        names = {x["name"] for x in got[3].get("result", {}).get("tools", [])}
        check(names == TOOLS, f"tools/list after initialize: {sorted(names)} {short(got[3].get('error') or '')}")

    checks.run("raw stdio: server/discover, then initialize 2025-11-25, then tools/list on one connection", go,
               lambda: [log])


# ---------------------------------------------------------------------------------------------
# the conformance suite's 2026-07-28 requirement set (@modelcontextprotocol/conformance
# 0.2.0-alpha.12, `server --requirements 2026-07-28`), through `up --auth none`

# Why a check may fail, per reason: every failing (FAILURE or WARNING) check must be listed here for
# its target, and every listed check must fail (a stale entry fails the run, as in the suite's own
# baselines). "bug" entries are product bugs we know of, reported with their own tag.
WHY = {
    "fixture": "the conformance fixture lacks what the check needs (a 2026 diagnostic tool, prompt or keyword)",
    "tasks": "the check needs the tasks scenarios' own tools (slow_compute, greet, failing_job, ...)",
    "n/a": "machine-mcp has no completions, nor the suite's own test prompts, resources and tools",
    "hook": "the check changes the tool list through the suite's diagnostic tool test_trigger_tool_change;"
            " machine-mcp's stdio supervisor declares tools.listChanged because an upgrade changes the list,"
            " which the suite cannot cause",
}
ALL = "*"  # the whole scenario (some of its checks fail, for this reason)
_IRR = ["basic-elicitation", "basic-list-roots", "basic-sampling", "capability-check", "ignore-extra-params",
        "missing-input-response", "multi-round", "multiple-input-requests", "non-tool-request", "request-state",
        "result-type", "tampered-state"]
_TASKS_TOOLS = {
    "tasks-capability-negotiation": ["sep-2663-server-rejects-undeclared-client", "tasks-per-request-meta-opt-in"],
    "tasks-dispatch-and-envelope": ["sep-2663-durable-create-strong-consistency", "sep-2663-legacy-task-param-ignored",
                                    "tasks-immediate-result-shortcut", "tasks-result-type-complete-on-non-task-responses",
                                    "tasks-server-directed-creation-no-hint"],
    "tasks-lifecycle": [ALL],
    "tasks-mrtr-composition": [ALL],
    "tasks-mrtr-input": [ALL],
    "tasks-request-headers": ["sep-2663-routing-headers-accepted-on-tasks-get",
                              "sep-2663-server-rejects-mismatched-mcp-name-on-tasks-get",
                              "tasks-headers-tolerate-mcp-method-on-tools-call"],
    "tasks-request-state-removal": [ALL],
    "tasks-required-task-error": [ALL],
    "tasks-wire-fields": [ALL],
}
_STATELESS_TOOLS = ["sep-2575-server-rejects-undeclared-capability", "sep-2575-missing-capability-http-400",
                    "sep-2575-http-server-no-independent-requests-on-stream", "sep-2575-server-no-log-without-loglevel"]


def _expected(target: str) -> dict[str, dict[str, str]]:
    """scenario -> {check id (or ALL): reason key} for target fixture|runtime|stdio."""
    e: dict[str, dict[str, str]] = {}

    def add(scenario: str, ids: list[str], why: str) -> None:
        e.setdefault(scenario, {}).update({i: why for i in ids})

    add("http-custom-header-server-validation", [ALL], "fixture" if target == "fixture" else "n/a")
    for name in _IRR:
        add(f"input-required-result-{name}", [ALL], "fixture" if target == "fixture" else "n/a")
    add("server-stateless", _STATELESS_TOOLS, "fixture" if target == "fixture" else "n/a")
    if target == "fixture":
        # no tasks extension at all: every tasks scenario but the skipped one fails
        for name in [*_TASKS_TOOLS, "tasks-capability-negotiation", "tasks-dispatch-and-envelope"]:
            add(name, [ALL], "fixture")
        add("json-schema-2020-12", [ALL], "fixture")  # no allOf, if/then/else, $anchor in its schema
        add("server-stateless", ["sep-2575-server-sends-prompts-list-changed-on-subscription",
                                 "sep-2575-server-sends-tools-list-changed-on-subscription"], "fixture")
        return e
    for name, ids in _TASKS_TOOLS.items():
        add(name, ids, "tasks")
    if target == "stdio":
        add("server-stateless", ["sep-2575-server-sends-tools-list-changed-on-subscription"], "hook")
    # Since issue 18 machine-mcp serves prompts (its skills) and resources (its instruction
    # files): prompts-list, resources-list and their caching hints pass; the scenarios that ask
    # for the suite's own fixture prompts, resources and tools still cannot.
    for name in ["completion-complete", "json-schema-2020-12", "sep-2164-resource-not-found",
                 "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource",
                 "prompts-get-with-image", "resources-read-text", "resources-read-binary",
                 "resources-templates-read", "tools-call-simple-text", "tools-call-image", "tools-call-audio",
                 "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
                 "tools-call-with-progress"]:
        add(name, [ALL], "n/a")
    return e


def cmd_conformance(target: str, label: str, rc: int, outdir: Path, log: Path, extra: list[Path]) -> int:
    """Judge one `--requirements 2026-07-28` run: one check that it ran (and that the scenarios
    not applicable to the target failed as expected), one per applicable scenario."""
    checks = Checks()
    expected = _expected(target)
    text = log.read_text(errors="replace") if log.exists() else ""
    ran = re.findall(r"^=== Running scenario: (\S+) ===", text, re.M)
    results: dict[str, list[dict[str, Any]] | None] = {}
    for name in ran:
        files = sorted(outdir.glob(f"server-{name}-*/checks.json"))
        results[name] = json.loads(files[-1].read_text()) if files else None
    logs = lambda: [log, *extra]  # noqa: E731

    def bad_of(items: list[dict[str, Any]]) -> dict[str, str]:
        return {c.get("id"): f"{c.get('status')} {c.get('id')}: {c.get('errorMessage', '')}"
                for c in items if c.get("status") in ("FAILURE", "WARNING")}

    def judge(name: str) -> None:
        items = results.get(name)
        check(items, f"no checks.json for {name}")
        bad, want = bad_of(items), expected.get(name, {})
        if ALL in want:
            check(bad, f"XPASS: {name} passed although expected to fail ({WHY[want[ALL]]}): remove the entry")
            return
        unexpected = [v for k, v in bad.items() if k not in want]
        check(not unexpected, "; ".join(unexpected)[:2000])
        stale = [k for k in want if k not in bad]
        check(not stale, f"XPASS: {stale} passed although listed as expected failures: remove the entries")

    def run() -> None:
        check(len(ran) >= 40, f"the suite ran {len(ran)} scenarios (exit {rc}), want the 2026-07-28 set")
        missing = [n for n, r in results.items() if r is None]
        check(not missing, f"no checks.json for {missing}")
        absent = sorted(set(expected) - set(ran))
        check(not absent, f"expected failures for scenarios that did not run: {absent}")
        wrong = []
        for name in ran:
            if ALL in expected.get(name, {}) and expected[name][ALL] in ("n/a", "fixture", "tasks"):
                try:
                    judge(name)
                except AssertionError as e:
                    wrong.append(f"{name}: {e}")
        check(not wrong, "; ".join(wrong)[:2000])

    checks.run(f"{label}: the 2026-07-28 requirement set ran ({len(ran)} scenarios)", run, logs)
    for name in ran:
        want = expected.get(name, {})
        if ALL in want and want[ALL] in ("n/a", "fixture", "tasks"):
            continue  # judged in the run check
        tags = sorted({WHY[w] for w in want.values()})
        tag = "".join(f" ({t})" if t.startswith("KNOWN") else "" for t in tags)
        n_expected = sum(1 for w in want.values() if not w.startswith("bug"))
        tag += f" ({n_expected} untestable check(s) expected to fail)" if n_expected else ""
        checks.run(f"{label}: {name}{tag}", lambda name=name: judge(name), logs)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------

def cmd_stdio(client: str, work: Path, binary: str, fixture: str) -> int:
    t = load_tree(work)
    tree = Path(t["tree"])
    logs = work / "logs"
    checks = Checks()
    if client == "raw":
        raw_checks(checks, tree, binary, logs)
        return 1 if checks.failed else 0
    ws = edit_copy(work, t, f"modern-{client}")
    args = ["stdio", "--workspace"]
    reads = {"stdio": [binary, *args, str(tree)]}
    edits = {"stdio": [binary, *args, str(ws)]}
    fixtures = [("stdio", {"stdio": [fixture]})]
    run = {"python": python_checks, "ts": ts_checks}[client]
    if client == "ts":
        reads, edits = {"command": binary, "args": [*args, str(tree)]}, {"command": binary, "args": [*args, str(ws)]}
        fixtures = [("stdio", {"command": fixture, "args": []})]
    run(checks, "stdio", tree, t, reads, edits, ws, t["edit"], TOOLS, fixtures, logs, [])
    return 1 if checks.failed else 0


def cmd_relay(client: str, work: Path, tree_up: Path, edit_up: Path) -> int:
    t = load_tree(work)
    tree = Path(t["tree"])
    a, b = load_up(tree_up), load_up(edit_up)
    logs = work / "logs"
    up_logs = [tree_up.with_suffix(".log"), edit_up.with_suffix(".log")]
    checks = Checks()
    ws, e = relay_copy(work / "relay-edits", t, f"modern-{client}")

    def target(url: str, up: dict[str, Any]) -> dict[str, Any]:
        return {"url": url, "token": up["token"]}

    fixtures = [(n, target(a["servers"][n], a)) for n in ("conformance", "legacy") if n in a.get("servers", {})]
    run = {"python": python_checks, "ts": ts_checks}[client]
    run(checks, "relay", tree, t, target(a["mcp_url"], a), target(b["mcp_url"], b), ws, e, AGENT_TOOLS,
        fixtures, logs, up_logs)
    if len(fixtures) != 2:
        checks.run(f"{client} 2026-07-28 (relay): up carries the fixture as `conformance` and `legacy`",
                   lambda: check(False, f"servers in up's JSON: {a.get('servers')}"), lambda: up_logs)
    return 1 if checks.failed else 0


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "stdio" and argv[1] in ("python", "ts", "raw"):
        return cmd_stdio(argv[1], Path(argv[2]), argv[3], argv[4])
    if len(argv) == 5 and argv[0] == "relay" and argv[1] in ("python", "ts"):
        return cmd_relay(argv[1], Path(argv[2]), Path(argv[3]), Path(argv[4]))
    if len(argv) >= 6 and argv[0] == "conformance" and argv[1] in ("fixture", "runtime", "stdio"):
        return cmd_conformance(argv[1], argv[2], int(argv[3]), Path(argv[4]), Path(argv[5]),
                               [Path(x) for x in argv[6:]])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
