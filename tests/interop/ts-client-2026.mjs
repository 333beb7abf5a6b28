// TypeScript client 2.x (@modelcontextprotocol/client) for tests/interop/run.sh, forced to MCP
// 2026-07-28 (`versionNegotiation: {mode: {pin: '2026-07-28'}}`: a server/discover at connect that
// must offer 2026-07-28, no fallback to initialize), driven by a plan; interop.py checks what it
// prints.
//
//   node ts-client-2026.mjs NODE_MODULES <plan.json
//
// plan: {"target": {"command": BIN, "args": [...]} (stdio) | {"url": URL, "token": T} (Streamable
//        HTTP with a bearer token),
//        "tasks": bool (declare the tasks extension io.modelcontextprotocol/tasks, SEP-2663),
//        "steps": [STEP, ...]}
// STEP: {"op": "tools"}                                  tools/list (all pages)
//       {"op": "call", "name", "arguments"}               client.callTool (the SDK validates
//                                                         structuredContent against outputSchema)
//       {"op": "task", "name", "arguments"}               tools/call (the result may be a
//                                                         CreateTaskResult, resultType "task"), then
//                                                         tasks/get every pollIntervalMs until a
//                                                         terminal status
//       {"op": "task_cancel", "name", "arguments", "wait_file"}
//                                                         tools/call; once WAIT_FILE has content,
//                                                         tasks/cancel, then tasks/get until terminal
//       {"op": "listen", "trigger": {"name", "arguments"}, "wait_ms"}
//                                                         subscriptions/listen {toolsListChanged};
//                                                         after the ack, call the trigger tool and
//                                                         wait (WAIT_MS, default 10 s) for
//                                                         notifications/tools/list_changed
// Task traffic goes around the SDK's request funnel: client 2.4.0's 2026-07-28 codec rejects
// `resultType: "task"` ("Unsupported result type 'task' for tools/call"), and its tasks companion
// @modelcontextprotocol/ext-tasks asks the host for exactly this ("rawDispatch: host-owned request
// coordinator used when SDK wire codecs reject V2 task traffic"): those requests are sent as raw
// JSON-RPC over the SDK's own connected transport (which adds the Mcp-Method/Mcp-Name headers on
// HTTP), with the per-request _meta framing (protocol version, client info, capabilities with the
// tasks extension) built here; their responses are taken off the transport before the SDK sees
// them.
// Prints one JSON object: {protocol_version, discover, server, steps: [{...} | {error}]}. A step
// that throws is reported as {error} and the rest go on. Exits non-zero only when it cannot
// connect at all (then stderr says why).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules] = process.argv.slice(2);
if (!modules) {
  console.error('usage: node ts-client-2026.mjs NODE_MODULES <plan.json');
  process.exit(2);
}
const pkg = (p) => import(pathToFileURL(join(modules, '@modelcontextprotocol/client/dist', p)).href);
const { Client, StreamableHTTPClientTransport } = await pkg('index.mjs');

const VERSION = '2026-07-28';
const TASKS = 'io.modelcontextprotocol/tasks';
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const timeout = 60_000;

const plan = JSON.parse(readFileSync(0, 'utf8'));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const errorOf = (e) => ({ error: `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`, code: e?.code ?? null, data: e?.data ?? null });

let transport;
if (plan.target.url) {
  const headers = plan.target.token ? { Authorization: `Bearer ${plan.target.token}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(plan.target.url), { requestInit: { headers } });
} else {
  const { StdioClientTransport } = await pkg('stdio.mjs');
  transport = new StdioClientTransport({ command: plan.target.command, args: plan.target.args ?? [], stderr: 'inherit' });
}
const capabilities = plan.tasks ? { extensions: { [TASKS]: {} } } : {};
const client = new Client({ name: 'machine-mcp-interop-2026', version: '0.0.0' },
  { capabilities, versionNegotiation: { mode: { pin: VERSION } } });
const listChanged = [];
client.setNotificationHandler('notifications/tools/list_changed', (n) => { listChanged.push(n); });
try {
  await client.connect(transport, { timeout });
} catch (e) {
  console.error(`connect failed: ${errorOf(e).error}`);
  process.exit(1);
}

const out = {
  protocol_version: client.getNegotiatedProtocolVersion() ?? null,
  discover: client.getDiscoverResult() ?? null,
  server: client.getServerVersion() ?? null,
  steps: [],
};

// raw requests (see the header): ids `raw:N`, answered off the transport
const clientInfo = { name: 'machine-mcp-interop-2026', version: '0.0.0' };
const rawPending = new Map();
let rawNext = 0;
const sdkOnMessage = transport.onmessage;
transport.onmessage = (msg, extra) => {
  if (msg && msg.method === undefined && rawPending.has(msg.id)) {
    rawPending.get(msg.id)(msg);
    rawPending.delete(msg.id);
    return;
  }
  sdkOnMessage?.call(transport, msg, extra);
};
async function raw(method, params) {
  const id = `raw:${++rawNext}`;
  const _meta = {
    'io.modelcontextprotocol/protocolVersion': VERSION,
    'io.modelcontextprotocol/clientInfo': clientInfo,
    'io.modelcontextprotocol/clientCapabilities': capabilities,
  };
  let timer;
  const answered = new Promise((resolve, reject) => {
    rawPending.set(id, resolve);
    timer = setTimeout(() => reject(new Error(`${method}: no response within ${timeout} ms`)), timeout);
  });
  await transport.send({ jsonrpc: '2.0', id, method, params: { ...params, _meta } });
  const response = await answered.finally(() => clearTimeout(timer));
  if (response.error) {
    throw Object.assign(new Error(`${method}: ${response.error.message}`), { name: 'JsonRpcError', code: response.error.code, data: response.error.data });
  }
  return response.result;
}
const rawCall = (name, args) => raw('tools/call', { name, arguments: args ?? {} });
const taskGet = (taskId) => raw('tasks/get', { taskId });

// tasks/get until a terminal status (or `limitMs`), honouring pollIntervalMs within [100, 1000]
async function pollTask(task, limitMs) {
  const polls = [];
  const deadline = Date.now() + limitMs;
  let last = task;
  while (!TERMINAL.has(last.status) && Date.now() < deadline) {
    await sleep(Math.min(1000, Math.max(100, last.pollIntervalMs ?? 500)));
    last = await taskGet(task.taskId);
    polls.push(last.status);
  }
  return { polls, final: last };
}

async function step(s) {
  switch (s.op) {
    case 'tools':
      return { tools: (await client.listTools(undefined, { timeout })).tools };
    case 'call':
      return { result: await client.callTool({ name: s.name, arguments: s.arguments ?? {} }, { timeout }) };
    case 'task': {
      const created = await rawCall(s.name, s.arguments);
      if (created.resultType !== 'task') return { created };
      return { created, ...(await pollTask(created, 60_000)) };
    }
    case 'task_cancel': {
      const created = await rawCall(s.name, s.arguments);
      if (created.resultType !== 'task') return { created };
      const until = Date.now() + 15_000;
      while (!(existsSync(s.wait_file) && readFileSync(s.wait_file, 'utf8').trim()) && Date.now() < until) await sleep(100);
      const cancel = await raw('tasks/cancel', { taskId: created.taskId });
      return { created, cancel, ...(await pollTask({ ...created, status: 'working' }, 15_000)) };
    }
    case 'listen': {
      const seen = listChanged.length;
      const sub = await client.listen({ toolsListChanged: true }, { timeout });
      const honored = sub.honoredFilter;
      const trigger = await client.callTool({ name: s.trigger.name, arguments: s.trigger.arguments ?? {} }, { timeout });
      const until = Date.now() + (s.wait_ms ?? 10_000);
      while (listChanged.length === seen && Date.now() < until) await sleep(50);
      const received = listChanged.slice(seen);
      await sub.close();
      return { honored, trigger, received, closed: await Promise.race([sub.closed, sleep(5000).then(() => 'not closed in 5 s')]) };
    }
    default:
      throw new Error(`unknown op ${s.op}`);
  }
}

for (const s of plan.steps ?? []) {
  try {
    out.steps.push(await step(s));
  } catch (e) {
    out.steps.push(errorOf(e));
  }
}
try {
  await client.close();
} catch {
  // the report matters, not the goodbye
}
// exit only once the pipe took the whole report: process.exit() drops what is still
// buffered past the pipe's 64 KiB
await new Promise((resolve) => process.stdout.write(JSON.stringify(out) + '\n', resolve));
process.exit(0);
