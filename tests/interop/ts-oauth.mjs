// TypeScript SDK OAuth client for tests/interop/run.sh (oauth.py ts): `StreamableHTTPClientTransport`
// with an `OAuthClientProvider` against `machine-mcp up` in oauth mode, signing in headless.
//
//   INTEROP_ACCOUNT=owner INTEROP_PASSWORD=... node ts-oauth.mjs NODE_MODULES MCP_URL WAIT_MS <plan.json
//
// plan: {"calls": [{"name": TOOL, "arguments": {...}}, ...]}. What it does: connect (401, then the
// SDK discovers the protected resource and authorization server metadata, registers the client
// (RFC 7591) and calls redirectToAuthorization, which here plays the person: GET the consent page,
// POST the approval form with the cookie, `redirect: 'manual'`, and read `code` from the 303's
// Location), `transport.finishAuth(code)`, connect again, `tools/list`, the plan's calls, wait
// WAIT_MS (past the access token's lifetime), the plan's calls again (the SDK must refresh on
// the 401), and DELETE the session. Prints one JSON object on stdout: {protocol_version,
// session_id, server, tools, before: [result | {error}], after: [...], terminated, consents (how
// often the provider was sent to the consent page), registered (client information saved),
// tokens (each saveTokens: {access, refresh, expires_in, scope}), wire: [{method, path, grant,
// bearer, status}]} (bearer and tokens as the first 12 characters; grant: a token request's
// grant_type). Exits non-zero only when it cannot connect at all.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, url, waitArg] = process.argv.slice(2);
if (!modules || !url) {
  console.error('usage: INTEROP_ACCOUNT=... INTEROP_PASSWORD=... node ts-oauth.mjs NODE_MODULES MCP_URL WAIT_MS <plan.json');
  process.exit(2);
}
const sdk = (p) => import(pathToFileURL(join(modules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { UnauthorizedError } = await sdk('client/auth.js');

const plan = JSON.parse(readFileSync(0, 'utf8'));
const waitMs = Number(waitArg ?? 0);
const short = (t) => (typeof t === 'string' ? t.slice(0, 12) : t ?? null);
const out = { protocol_version: null, session_id: null, server: null, tools: [], before: [], after: [],
  terminated: false, consents: 0, registered: null, tokens: [], wire: [], consent_errors: [] };

// the wire as the SDK sends it (MCP requests and its OAuth requests alike)
const recordingFetch = async (input, init = {}) => {
  const u = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  const auth = headers.get('authorization') ?? '';
  let grant = null;
  if (u.pathname.endsWith('/token') && init.body) grant = new URLSearchParams(String(init.body)).get('grant_type');
  let method = null;
  if (init.method === 'POST' && typeof init.body === 'string' && init.body.startsWith('{')) {
    try { method = JSON.parse(init.body).method ?? '(response)'; } catch { /* not JSON-RPC */ }
  }
  const entry = { http: init.method ?? 'GET', path: u.pathname, method, grant,
    bearer: auth.startsWith('Bearer ') ? short(auth.slice(7)) : null, status: null };
  out.wire.push(entry);
  const r = await fetch(input, init);
  entry.status = r.status;
  return r;
};

// the person at the browser: sign in and approve, without following the redirect
let code = null;
const unescape = (s) => s.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
async function consent(authorizationUrl) {
  const page = await fetch(authorizationUrl, { redirect: 'manual' });
  const html = await page.text();
  if (page.status !== 200) throw new Error(`consent page: HTTP ${page.status}: ${html.slice(0, 300)}`);
  const cookie = page.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
  const request = html.match(/<input type="hidden" name="request" value="([^"]*)"/)?.[1];
  const action = html.match(/<form method="post" action="([^"]+)"/)?.[1];
  if (!request || !action) throw new Error('consent page: no form with a hidden request field');
  const body = new URLSearchParams({ request: unescape(request), account: process.env.INTEROP_ACCOUNT ?? 'owner',
    password: process.env.INTEROP_PASSWORD ?? '', action: 'approve' });
  const r = await fetch(new URL(unescape(action), authorizationUrl), { method: 'POST', redirect: 'manual', body,
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie } });
  const location = r.headers.get('location');
  if (r.status !== 303 || !location) throw new Error(`consent POST: HTTP ${r.status}, Location ${location}: ${(await r.text()).slice(0, 300)}`);
  const back = new URL(location);
  if (back.searchParams.get('state') !== authorizationUrl.searchParams.get('state')) throw new Error(`state mismatch in ${location}`);
  code = back.searchParams.get('code');
  if (!code) throw new Error(`no code in ${location}`);
  out.iss = back.searchParams.get('iss');
}

const redirectUrl = 'http://127.0.0.1:9/oauth/callback'; // never reached: the code is read from Location
const store = { client: undefined, tokens: undefined, verifier: undefined };
const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return { client_name: 'machine-mcp interop (TypeScript SDK)', redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  },
  state() { return `st-${Math.random().toString(36).slice(2)}`; },
  clientInformation() { return store.client; },
  saveClientInformation(info) { store.client = info; out.registered = { client_id: info.client_id, grant_types: info.grant_types }; },
  tokens() { return store.tokens; },
  saveTokens(t) {
    store.tokens = t;
    out.tokens.push({ access: short(t.access_token), refresh: short(t.refresh_token), expires_in: t.expires_in ?? null, scope: t.scope ?? null });
  },
  async redirectToAuthorization(authorizationUrl) {
    out.consents += 1;
    out.authorization_url = authorizationUrl.href;
    try { await consent(authorizationUrl); } catch (e) { out.consent_errors.push(String(e?.message ?? e)); }
  },
  saveCodeVerifier(v) { store.verifier = v; },
  codeVerifier() { return store.verifier; },
};

const timeout = 60_000;
const newTransport = () => new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: recordingFetch });
let client = new Client({ name: 'machine-mcp-interop-oauth', version: '0.0.0' });
let transport = newTransport();
try {
  await client.connect(transport, { timeout });
} catch (e) {
  if (!(e instanceof UnauthorizedError) || !code) {
    console.error(`connect: ${e?.name}: ${e?.message}; consent errors: ${out.consent_errors.join('; ')}`);
    // exit only once the pipe took the whole report (process.exit() drops what is buffered)
    await new Promise((resolve) => process.stdout.write(JSON.stringify(out) + '\n', resolve));
    process.exit(1);
  }
  await transport.finishAuth(code); // exchanges the code (PKCE verifier, resource) for tokens
  client = new Client({ name: 'machine-mcp-interop-oauth', version: '0.0.0' });
  transport = newTransport();
  await client.connect(transport, { timeout });
}
out.protocol_version = transport.protocolVersion ?? null;
out.session_id = transport.sessionId ?? null;
out.server = client.getServerVersion() ?? null;
const errorOf = (e) => ({ error: `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}` });
try { out.tools = (await client.listTools(undefined, { timeout })).tools.map((t) => t.name); } catch (e) { out.tools_error = errorOf(e).error; }
const calls = async (into) => {
  for (const call of plan.calls ?? []) {
    try { into.push({ result: await client.callTool({ name: call.name, arguments: call.arguments ?? {} }, undefined, { timeout }) }); }
    catch (e) { into.push(errorOf(e)); }
  }
};
await calls(out.before);
out.wire.push({ mark: `waiting ${waitMs} ms` });
await new Promise((r) => setTimeout(r, waitMs));
await calls(out.after);
try {
  await transport.terminateSession();
  out.terminated = transport.sessionId === undefined ? true : `session id still set: ${transport.sessionId}`;
} catch (e) { out.terminated = errorOf(e).error; }
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
