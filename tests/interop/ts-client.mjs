// TypeScript SDK client for tests/interop/run.sh: one MCP session over Streamable HTTP with a
// bearer token, driven by a plan; interop.py checks what it prints.
//
//   INTEROP_TOKEN=mbt_... node ts-client.mjs NODE_MODULES URL <plan.json
//
// plan: {"calls": [{"name": TOOL, "arguments": {...}}, ...]}. Prints one JSON object on stdout:
// {protocol_version, session_id, server, capabilities, tools: [Tool], results: [{result} | {error}],
//  terminated: bool | string}. Each tool call is validated by the SDK itself (structuredContent
// against the tool's outputSchema); a call that throws is reported as {error} and the rest go on.
// Exits non-zero only when the session cannot be set up at all.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, url] = process.argv.slice(2);
if (!modules || !url) {
  console.error('usage: INTEROP_TOKEN=... node ts-client.mjs NODE_MODULES URL <plan.json');
  process.exit(2);
}
const sdk = (p) => import(pathToFileURL(join(modules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const plan = JSON.parse(readFileSync(0, 'utf8'));
const headers = {};
if (process.env.INTEROP_TOKEN) headers.Authorization = `Bearer ${process.env.INTEROP_TOKEN}`;

const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: 'machine-mcp-interop', version: '0.0.0' });
const timeout = 60_000;
await client.connect(transport, { timeout });

const out = {
  protocol_version: transport.protocolVersion ?? null,
  session_id: transport.sessionId ?? null,
  server: client.getServerVersion() ?? null,
  capabilities: client.getServerCapabilities() ?? null,
  tools: [],
  results: [],
  terminated: false,
};
const errorOf = (e) => ({ error: `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`, code: e?.code ?? null });
try {
  out.tools = (await client.listTools(undefined, { timeout })).tools;
} catch (e) {
  out.tools_error = errorOf(e).error;
}
for (const call of plan.calls ?? []) {
  try {
    out.results.push({ result: await client.callTool({ name: call.name, arguments: call.arguments ?? {} }, undefined, { timeout }) });
  } catch (e) {
    out.results.push(errorOf(e));
  }
}
try {
  await transport.terminateSession(); // DELETE with the session id
  out.terminated = transport.sessionId === undefined ? true : `session id still set: ${transport.sessionId}`;
} catch (e) {
  out.terminated = errorOf(e).error;
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
