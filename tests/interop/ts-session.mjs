// A long-lived TypeScript SDK session for tests/interop/run.sh (restart.py): one handshake-era
// session (initialize, MCP-Session-Id) over Streamable HTTP with a bearer token, kept open while
// the script driving it restarts and upgrades the daemon behind the relay; each tool call is
// asked for on stdin and answered on stdout, on the same Client and transport.
//
//   INTEROP_TOKEN=mbt_... node ts-session.mjs NODE_MODULES URL
//
// stdin: one JSON object a line: {"call": TOOL, "arguments": {...}}, {"wire": true} or
// {"quit": true}. stdout: one JSON object a line: first {connected: {protocol_version,
// session_id, server}}, then per call {result} or {error, code, session_id}, per wire request
// {wire: [...], errors: [...]}, and for quit {terminated} (DELETE ended the session, or why not).
// The wire is every HTTP request the SDK sent through the transport's `fetch`, in order: {http,
// rpc, session, status, session_out} (rpc: the JSON-RPC method, "(response)" or "-" for no body;
// session: the MCP-Session-Id sent; session_out: the one answered). Exits non-zero only when the
// session cannot be set up at all.
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, url] = process.argv.slice(2);
if (!modules || !url) {
  console.error('usage: INTEROP_TOKEN=... node ts-session.mjs NODE_MODULES URL');
  process.exit(2);
}
const sdk = (p) => import(pathToFileURL(join(modules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const wire = [];
const headerOf = (init, name) => {
  const h = new Headers(init?.headers ?? {});
  return h.get(name);
};
const recordingFetch = async (input, init) => {
  let rpc = '-';
  if (typeof init?.body === 'string') {
    try {
      rpc = JSON.parse(init.body).method ?? '(response)';
    } catch {
      rpc = '(unparsed)';
    }
  }
  const entry = { http: init?.method ?? 'GET', rpc, session: headerOf(init, 'mcp-session-id'), status: null, session_out: null };
  wire.push(entry);
  const r = await fetch(input, init);
  entry.status = r.status;
  entry.session_out = r.headers.get('mcp-session-id');
  return r;
};

const headers = {};
if (process.env.INTEROP_TOKEN) headers.Authorization = `Bearer ${process.env.INTEROP_TOKEN}`;
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, fetch: recordingFetch });
const client = new Client({ name: 'machine-mcp-interop-restart', version: '0.0.0' });
const errors = [];
client.onerror = (e) => errors.push(String(e?.message ?? e));
const timeout = 60_000;
await client.connect(transport, { timeout });

const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');
say({
  connected: {
    protocol_version: transport.protocolVersion ?? null,
    session_id: transport.sessionId ?? null,
    server: client.getServerVersion() ?? null,
  },
});

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const ask = JSON.parse(line);
  if (ask.quit) break;
  if (ask.wire) {
    say({ wire, errors });
    continue;
  }
  try {
    say({ result: await client.callTool({ name: ask.call, arguments: ask.arguments ?? {} }, undefined, { timeout }) });
  } catch (e) {
    say({ error: `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`, code: e?.code ?? null, session_id: transport.sessionId ?? null });
  }
}
let terminated;
try {
  await transport.terminateSession();
  terminated = true;
} catch (e) {
  terminated = `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`;
}
say({ terminated });
await client.close();
