// The relay's OAuth consent page in a real browser, for tests/interop/run.sh (oauth.py browser):
// Debian's Chromium, headless, driven by playwright-core.
//
//   INTEROP_ACCOUNT=owner INTEROP_PASSWORD=... INTEROP_CHROMIUM=/usr/bin/chromium \
//     node consent-browser.mjs NODE_MODULES MCP_URL ARTIFACT_DIR
//
// As an OAuth client would: read the protected resource and authorization server metadata,
// register a client (RFC 7591) whose redirect URI is a loopback listener of ours, build an
// authorization URL with PKCE (S256), `state` and `resource` = MCP_URL, and open it in Chromium.
// Then as a person would: screenshot the consent page (ARTIFACT_DIR/consent-page.png), sign in
// once with a wrong password (the page must come back with 401 and the reason; screenshot
// consent-page-wrong-password.png), then fill the account and password and click Allow; the
// browser must land on our redirect URI with `code`, `state` and `iss`. Last, as the client
// again: exchange the code (with the PKCE verifier) at the token endpoint and use the access
// token on MCP_URL with the TypeScript SDK (initialize, tools/list, read_file hello.txt).
// Prints one JSON object on stdout (what happened at each step; oauth.py judges it); exits
// non-zero only when it could not get that far.
import { createServer } from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, mcpUrl, artifacts] = process.argv.slice(2);
if (!modules || !mcpUrl || !artifacts) {
  console.error('usage: INTEROP_ACCOUNT=... INTEROP_PASSWORD=... node consent-browser.mjs NODE_MODULES MCP_URL ARTIFACT_DIR');
  process.exit(2);
}
const load = (p) => import(pathToFileURL(join(modules, p)).href);
const { chromium } = await load('playwright-core/index.mjs');
const { Client } = await load('@modelcontextprotocol/sdk/dist/esm/client/index.js');
const { StreamableHTTPClientTransport } = await load('@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js');

const out = { steps: [] };
const step = (name, data) => { out.steps.push(name); Object.assign(out, data); };
// `await done(code)`: exits once the pipe took the whole report (process.exit() right after a
// write drops what is still buffered past the pipe's 64 KiB); the promise never resolves
const done = (code) => new Promise(() => process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(code)));
const b64url = (b) => b.toString('base64url');
const getJson = async (u, init) => {
  const r = await fetch(u, init);
  const text = await r.text();
  if (!r.ok) throw new Error(`${init?.method ?? 'GET'} ${u}: HTTP ${r.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
};

// our redirect URI: a loopback listener that records what the browser brings back
let arrived;
const callback = new Promise((resolve) => { arrived = resolve; });
const server = createServer((req, res) => {
  const u = new URL(req.url, 'http://127.0.0.1');
  if (u.pathname === '/callback') arrived(Object.fromEntries(u.searchParams));
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end('<!doctype html><title>Signed in</title><p>Signed in. You can close this window.</p>');
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const redirectUri = `http://127.0.0.1:${server.address().port}/callback`;

let browser;
try {
  // discovery and registration, as an MCP client does them
  const origin = new URL(mcpUrl).origin;
  const prm = await getJson(`${origin}/.well-known/oauth-protected-resource${new URL(mcpUrl).pathname}`);
  const issuer = prm.authorization_servers[0];
  const as = await getJson(`${issuer}/.well-known/oauth-authorization-server`);
  const client = await getJson(as.registration_endpoint, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ client_name: 'machine-mcp interop (Chromium)', redirect_uris: [redirectUri],
      grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' }),
  });
  const verifier = b64url(randomBytes(32));
  const state = b64url(randomBytes(16));
  const authorize = new URL(as.authorization_endpoint);
  for (const [k, v] of Object.entries({ response_type: 'code', client_id: client.client_id, redirect_uri: redirectUri,
    state, code_challenge: b64url(createHash('sha256').update(verifier).digest()), code_challenge_method: 'S256',
    resource: prm.resource, scope: 'mcp' })) authorize.searchParams.set(k, v);
  step('registered', { issuer, resource: prm.resource, client_id: client.client_id, redirect_uri: redirectUri,
    authorization_url: authorize.href });

  browser = await chromium.launch({
    executablePath: process.env.INTEROP_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  out.browser_version = browser.version();
  const context = await browser.newContext({ viewport: { width: 800, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);

  // the consent page
  const shown = await page.goto(authorize.href);
  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, 'consent-page.png');
  await page.screenshot({ path: shot, fullPage: true });
  const cookies = await context.cookies(authorize.href); // Path=/oauth/authorize
  step('consent page', {
    page_status: shown.status(), title: await page.title(), heading: (await page.textContent('h1'))?.trim(),
    form_action: await page.getAttribute('form', 'action'), form_method: await page.getAttribute('form', 'method'),
    has_account: await page.isVisible('#account'), has_password: await page.isVisible('#password'),
    buttons: await page.$$eval('button[name=action]', (bs) => bs.map((b) => `${b.value}:${b.textContent.trim()}`)),
    cookie: cookies.filter((c) => c.name === 'mb_consent').map((c) => ({ path: c.path, httpOnly: c.httpOnly, sameSite: c.sameSite }))[0] ?? null,
    screenshot: shot, screenshot_bytes: statSync(shot).size,
  });

  // a wrong password: the page comes back with the reason
  const account = process.env.INTEROP_ACCOUNT ?? 'owner';
  await page.fill('#account', account);
  await page.fill('#password', 'not-the-password');
  const [wrong] = await Promise.all([
    page.waitForResponse((r) => r.url().startsWith(as.authorization_endpoint) && r.request().method() === 'POST'),
    page.click('button[value=approve]'),
  ]);
  await page.waitForLoadState();
  const wrongShot = join(artifacts, 'consent-page-wrong-password.png');
  await page.screenshot({ path: wrongShot, fullPage: true });
  const sent = await wrong.request().allHeaders(); // what Chromium put on the form POST
  step('wrong password', { post_origin: sent.origin ?? null, post_sec_fetch_site: sent['sec-fetch-site'] ?? null,
    wrong_status: wrong.status(), wrong_error: (await page.textContent('.error', { timeout: 2000 }).catch(() => null))?.trim() ?? null,
    wrong_account_kept: await page.inputValue('#account', { timeout: 2000 }).catch(() => null), wrong_screenshot: wrongShot });

  if (!(await page.isVisible('#password'))) await done(1); // no form to sign in with again

  // the right one: fill, click Allow, and the browser lands on our redirect URI
  await page.fill('#account', account);
  await page.fill('#password', process.env.INTEROP_PASSWORD ?? '');
  const [allowed] = await Promise.all([
    page.waitForResponse((r) => r.url().startsWith(as.authorization_endpoint) && r.request().method() === 'POST'),
    page.click('button[value=approve]'),
  ]);
  out.allow_status = allowed.status();
  if (allowed.status() !== 303) {
    await page.waitForLoadState();
    out.allow_error = (await page.textContent('.error', { timeout: 2000 }).catch(() => null))?.trim() ?? null;
    await done(1);
  }
  await page.waitForURL((u) => u.href.startsWith(redirectUri), { timeout: 30_000 });
  const back = await Promise.race([callback, new Promise((r) => setTimeout(() => r(null), 10_000))]);
  step('approved', { landed: page.url().split('?')[0], callback: back ? { ...back, code: back.code ? `${back.code.slice(0, 8)}...` : null } : null,
    state_ok: back?.state === state });
  await browser.close();
  browser = undefined;
  if (!back?.code) await done(1);

  // the client again: code -> token (PKCE), and the token on the MCP URL
  const token = await getJson(as.token_endpoint, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: back.code, redirect_uri: redirectUri,
      client_id: client.client_id, code_verifier: verifier, resource: prm.resource }),
  });
  step('token', { token_type: token.token_type, expires_in: token.expires_in, scope: token.scope,
    has_refresh_token: 'refresh_token' in token });
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl),
    { requestInit: { headers: { Authorization: `Bearer ${token.access_token}` } } });
  const mcp = new Client({ name: 'machine-mcp-interop-chromium', version: '0.0.0' });
  await mcp.connect(transport, { timeout: 60_000 });
  const tools = (await mcp.listTools()).tools.map((t) => t.name);
  const read = await mcp.callTool({ name: 'read_file', arguments: { path: 'hello.txt' } });
  step('mcp', { protocol_version: transport.protocolVersion ?? null, server: mcp.getServerVersion()?.name ?? null, tools,
    read: read.structuredContent ?? read });
  await transport.terminateSession().catch(() => {});
  await mcp.close();
  await done(0);
} catch (e) {
  out.error = `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`;
  if (browser) await browser.close().catch(() => {});
  await done(1);
} finally {
  server.close();
}
