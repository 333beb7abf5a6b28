// Preloaded into the conformance suite (`node --import ./inject-headers.mjs .../conformance/dist/index.js
// server --url URL ...`) by tests/interop/run.sh: the suite has no option for request headers, so
// this wraps the global fetch, which its MCP client (the TypeScript SDK's
// StreamableHTTPClientTransport) uses, and adds headers to every request for the target's origin.
//
// Environment: INTEROP_INJECT_URL (the suite's --url) and INTEROP_INJECT_HEADERS (a JSON object,
// e.g. {"Authorization": "Bearer mbt_..."}). A header the request already has is left alone.
//
// Requests the suite makes without fetch (the dns-rebinding-protection scenario uses undici's
// request() directly) are not covered: they reach the server without these headers.
const extra = JSON.parse(process.env.INTEROP_INJECT_HEADERS ?? '{}');
const origin = new URL(process.env.INTEROP_INJECT_URL).origin;
const original = globalThis.fetch;

globalThis.fetch = (input, init = {}) => {
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  if (url.origin !== origin) return original(input, init);
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  for (const [name, value] of Object.entries(extra)) if (!headers.has(name)) headers.set(name, value);
  return original(input, { ...init, headers });
};
