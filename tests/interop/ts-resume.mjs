// The TypeScript SDK resuming a dropped SSE stream, for tests/interop/run.sh (issue 15): a TCP
// proxy in this script sits between the SDK's StreamableHTTPClientTransport and the relay; while
// a run_process call streams progress, the proxy drops the connection carrying it. The SDK must
// reconnect by itself with GET + Last-Event-ID (it does so after a priming event, SDK >= 1.2x)
// and the call must end with its one result: no progress lost or repeated, the process run once.
//
//   INTEROP_TOKEN=mbt_... node ts-resume.mjs NODE_MODULES MCP_URL WORKSPACE
//
// MCP_URL is the relay's http://127.0.0.1:PORT/... URL; WORKSPACE that `up`'s workspace (the
// process appends to a file there). Prints `PASS name` / `FAIL name: why` lines; exits non-zero
// only when it cannot run at all.
import { readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, mcpUrl, workspace] = process.argv.slice(2);
if (!modules || !mcpUrl || !workspace) {
  console.error('usage: INTEROP_TOKEN=... node ts-resume.mjs NODE_MODULES MCP_URL WORKSPACE');
  process.exit(2);
}
const sdk = (p) => import(pathToFileURL(join(modules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const target = new URL(mcpUrl);
// The proxy: every connection is piped to the relay; `dropStream` destroys, once, the
// connections whose responses carried progress notifications (the call's POST stream).
const TOKEN = 'notifications/progress';
const conns = new Set();
const server = net.createServer((inbound) => {
  const outbound = net.connect(Number(target.port), target.hostname);
  const c = { inbound, outbound, progress: false };
  conns.add(c);
  outbound.on('data', (d) => {
    if (d.includes(TOKEN)) c.progress = true;
  });
  inbound.pipe(outbound);
  outbound.pipe(inbound);
  const end = () => {
    conns.delete(c);
    inbound.destroy();
    outbound.destroy();
  };
  inbound.on('error', end).on('close', end);
  outbound.on('error', end).on('close', end);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
let dropped = 0;
const dropStream = () => {
  for (const c of conns) {
    if (c.progress) {
      dropped += 1;
      c.inbound.destroy();
      c.outbound.destroy();
    }
  }
};

const url = new URL(mcpUrl);
url.port = String(server.address().port);
const headers = {};
if (process.env.INTEROP_TOKEN) headers.Authorization = `Bearer ${process.env.INTEROP_TOKEN}`;
const errors = [];
const transport = new StreamableHTTPClientTransport(url, {
  requestInit: { headers },
  reconnectionOptions: { initialReconnectionDelay: 200, maxReconnectionDelay: 2000, reconnectionDelayGrowFactor: 1.5, maxRetries: 5 },
});
const client = new Client({ name: 'machine-mcp-interop-resume', version: '0.0.0' });
client.onerror = (e) => errors.push(String(e?.message ?? e));
await client.connect(transport, { timeout: 60_000 });

const check = (name, ok, why) => console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`);
const log = join(workspace, 'ts-resume.log');
rmSync(log, { force: true });
const ids = [];
const progress = [];
let result;
let failure;
try {
  result = await client.callTool(
    {
      name: 'run_process',
      arguments: { argv: ['sh', '-c', 'echo run >> ts-resume.log; for i in $(seq 1 16); do echo line$i; sleep 0.25; done'] },
    },
    undefined,
    {
      timeout: 60_000,
      onresumptiontoken: (id) => ids.push(id),
      onprogress: (p) => {
        progress.push(p.progress);
        if (progress.length === 3) dropStream();
      },
    },
  );
} catch (e) {
  failure = `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`;
}
const name = 'ts sdk: a dropped SSE stream resumes with Last-Event-ID';
const seqs = ids.map((id) => Number(id.slice(id.lastIndexOf('-') + 1)));
const streams = new Set(ids.map((id) => id.slice(0, id.lastIndexOf('-'))));
const contiguous = seqs.every((n, i) => n === i);
const stdout = result?.structuredContent?.stdout ?? '';
let runs = '';
try {
  runs = readFileSync(log, 'utf8');
} catch (e) {
  runs = `unreadable: ${e.message}`;
}
if (failure) {
  check(name, false, `${failure}; dropped ${dropped} connection(s); event ids ${JSON.stringify(ids)}; errors ${JSON.stringify(errors)}`);
} else if (dropped === 0) {
  check(name, false, `the proxy found no connection carrying the progress to drop (progress ${JSON.stringify(progress)}, ids ${JSON.stringify(ids)}, conns ${conns.size}, result ${JSON.stringify(result).slice(0, 300)})`);
} else if (!errors.some((e) => e.includes('SSE stream disconnected'))) {
  check(name, false, `the SDK did not see the drop: ${JSON.stringify(errors)}`);
} else if (streams.size !== 1 || !contiguous) {
  check(name, false, `event ids lost or repeated: ${JSON.stringify(ids)}`);
} else if (result.isError || !stdout.endsWith('line16\n')) {
  check(name, false, `result: ${JSON.stringify(result)}`);
} else if (runs !== 'run\n') {
  check(name, false, `the process ran ${JSON.stringify(runs)} (once expected)`);
} else {
  // progress values strictly increase: none lost to the drop went missing twice
  const increasing = progress.every((p, i) => i === 0 || p > progress[i - 1]);
  check(name, increasing, `progress repeated or out of order: ${JSON.stringify(progress)}`);
}
await transport.terminateSession().catch(() => {});
await client.close();
server.close();
for (const c of conns) {
  c.inbound.destroy();
  c.outbound.destroy();
}
