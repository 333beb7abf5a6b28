#!/usr/bin/env python3
"""OAuth checks for tests/interop/run.sh: real OAuth clients against `machine-mcp up` in its
default `--auth oauth` mode (the relay is the authorization server and the MCP resource server),
signing in headless on the relay's consent page as the account `up --json` prints.

Subcommands (each check prints `PASS <name>` or `FAIL <name>: <why>`, as interop.py's do; UP is
the file holding `up --json`'s line, started with `--oauth-access-token-ttl-secs $INTEROP_OAUTH_TTL`
and a workspace holding hello.txt):

  token UP [SERVER]       sign in headless (RFC 7591 registration, consent page, PKCE code
                          exchange) for up's MCP URL, or for its carried server SERVER, and print
                          the access token (for the conformance suite's run with an OAuth token)
  mcp-remote WORK UP      mcp-remote as a stdio proxy, driven by the Python SDK's stdio client,
                          BROWSER=fake-browser.py: sign-in, calls, a refresh past the access
                          token's lifetime, and a second run on the stored tokens (no browser)
  ts WORK UP              the TypeScript SDK's OAuthClientProvider (ts-oauth.mjs)
  python WORK UP          the Python SDK's OAuthClientProvider, in legacy mode and then at
                          2026-07-28 (stateless) with the same provider and token storage
  browser WORK UP DIR     the consent page in headless Chromium (consent-browser.mjs, playwright-
                          core, env INTEROP_CHROMIUM); screenshots into DIR
  authorization WORK UP   the conformance suite's authorization-server scenarios (0.2.0-alpha.12,
                          `conformance authorization`) against the relay, fake-browser.py
                          approving the suite's authorization request

Env: INTEROP_NODE, INTEROP_NODE_MODULES (all but token and python), INTEROP_OAUTH_TTL (the access
token lifetime `up` was started with; the clients wait INTEROP_OAUTH_TTL + 2 s before calling
again). Needs the `mcp` package for mcp-remote and python; the rest uses the standard library.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from interop import CALL_TIMEOUT, Checks, check, short

HERE = Path(__file__).resolve().parent
FAKE_BROWSER = HERE / "fake-browser.py"
HELLO = "hello.txt"  # the one file of the oauth `up`'s workspace (run.sh writes it)
TTL = int(os.environ.get("INTEROP_OAUTH_TTL", "3"))
WAIT = TTL + 2  # past the access token's lifetime, on the relay's clock and the client's
CONF26 = "conformance-2026/dist/index.js"  # @modelcontextprotocol/conformance 0.2.0-alpha.12
AUTHORIZATION_SCENARIOS = ["authorization-server-metadata-endpoint", "authorization-code-grant"]


def fake_browser() -> Any:
    """fake-browser.py as a module (its name has a dash): `approve(url, account, password)`."""
    spec = importlib.util.spec_from_file_location("fake_browser", FAKE_BROWSER)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_up(path: Path) -> dict[str, Any]:
    up = json.loads(path.read_text().splitlines()[0])
    check(up.get("account") and up.get("password"), f"up's JSON line has no account and one-time password: {short(up)}")
    return up


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hello(work: Path) -> str:
    return (work / "oauth-ws" / HELLO).read_text()


def check_hello(work: Path, sc: Any, what: str) -> None:
    check(isinstance(sc, dict) and sc.get("content") == hello(work),
          f"{what}: read_file {HELLO}: {short(sc)}")


# ---------------------------------------------------------------------------------------------
# a headless OAuth client of our own (standard library): discovery, registration, PKCE

def http_json(url: str, body: dict[str, Any] | None = None, form: dict[str, str] | None = None) -> Any:
    data, headers = None, {}
    if body is not None:
        data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
    elif form is not None:
        data, headers = urllib.parse.urlencode(form).encode(), {"Content-Type": "application/x-www-form-urlencoded"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{'POST' if data else 'GET'} {url}: HTTP {e.code}: {e.read()[:300]!r}") from None


def discover(mcp_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(protected resource metadata, authorization server metadata) for mcp_url, found as an MCP
    client finds them: the 401's WWW-Authenticate names the resource metadata (RFC 9728)."""
    req = urllib.request.Request(mcp_url, data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                 headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    try:
        urllib.request.urlopen(req, timeout=30).close()
        raise AssertionError(f"{mcp_url} answered without a token")
    except urllib.error.HTTPError as e:
        check(e.code == 401, f"{mcp_url} without a token: HTTP {e.code}, want 401")
        challenge = e.headers.get("WWW-Authenticate", "")
    m = re.search(r'resource_metadata="([^"]+)"', challenge)
    check(m, f"WWW-Authenticate {challenge!r} names no resource_metadata")
    prm = http_json(m.group(1))
    asm = http_json(prm["authorization_servers"][0].rstrip("/") + "/.well-known/oauth-authorization-server")
    return prm, asm


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(asm: dict[str, Any], name: str, redirect_uri: str, grants: list[str]) -> dict[str, Any]:
    return http_json(asm["registration_endpoint"], body={
        "client_name": name, "redirect_uris": [redirect_uri], "grant_types": grants,
        "response_types": ["code"], "token_endpoint_auth_method": "none"})


def sign_in(up: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    """Register, approve on the consent page (fake-browser.py's approve, without following the
    redirect: nothing listens there), exchange the code: the token response."""
    prm, asm = discover(mcp_url)
    redirect_uri = "http://127.0.0.1:9/callback"
    client = register(asm, "machine-mcp interop (token for the conformance suite)", redirect_uri, ["authorization_code"])
    verifier, challenge = pkce()
    state = secrets.token_urlsafe(16)
    query = urllib.parse.urlencode({
        "response_type": "code", "client_id": client["client_id"], "redirect_uri": redirect_uri, "state": state,
        "code_challenge": challenge, "code_challenge_method": "S256", "resource": prm["resource"], "scope": "mcp"})
    location = fake_browser().approve(f"{asm['authorization_endpoint']}?{query}", up["account"], up["password"])
    back = urllib.parse.parse_qs(urllib.parse.urlparse(location).query)
    check(back.get("state") == [state], f"state {back.get('state')} in {location}, want {state}")
    check(back.get("iss") == [asm["issuer"]], f"iss {back.get('iss')} in {location}, want {asm['issuer']}")
    return http_json(asm["token_endpoint"], form={
        "grant_type": "authorization_code", "code": back["code"][0], "redirect_uri": redirect_uri,
        "client_id": client["client_id"], "code_verifier": verifier, "resource": prm["resource"]})


def cmd_token(up_path: Path, server: str | None) -> int:
    up = load_up(up_path)
    url = up["servers"][server] if server else up["mcp_url"]
    token = sign_in(up, url)
    check(token.get("token_type") == "Bearer" and token.get("access_token"), f"token response {short(token)}")
    print(token["access_token"])
    return 0


# ---------------------------------------------------------------------------------------------
# mcp-remote: a stdio proxy that signs in through $BROWSER

def cmd_mcp_remote(work: Path, up_path: Path) -> int:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    up = load_up(up_path)
    node, modules = os.environ["INTEROP_NODE"], Path(os.environ["INTEROP_NODE_MODULES"])
    logs = work / "logs"
    config, home = work / "mcp-remote-config", work / "mcp-remote-home"
    home.mkdir(exist_ok=True)
    browser_log = logs / "oauth-browser.log"
    browser_log.write_text("")
    port = free_port()
    # no DISPLAY, WAYLAND_DISPLAY or XDG_CURRENT_DESKTOP: xdg-open runs $BROWSER URL
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "MCP_REMOTE_CONFIG_DIR": str(config),
           "BROWSER": str(FAKE_BROWSER), "FAKE_BROWSER_LOG": str(browser_log),
           "FAKE_BROWSER_ACCOUNT": up["account"], "FAKE_BROWSER_PASSWORD": up["password"]}
    argv = [str(modules / "mcp-remote/dist/proxy.js"), up["mcp_url"], str(port), "--debug"]
    checks = Checks()
    runs: list[dict[str, Any]] = [{}, {}]

    def browser_runs() -> int:
        return browser_log.read_text().count("]: GET ")

    def stored(kind: str) -> dict[str, Any]:
        files = sorted(config.rglob(f"*_{kind}.json"))
        return json.loads(files[0].read_text()) if files else {}

    def session(i: int, body: Callable[[Any, dict[str, Any]], Any]) -> None:
        out = runs[i]
        log = logs / f"oauth-mcp-remote-{i + 1}.log"

        async def main() -> None:
            with open(log, "a") as errlog, anyio.fail_after(CALL_TIMEOUT * 2):
                params = StdioServerParameters(command=node, args=argv, env=env)
                async with Client(stdio_client(params, errlog=errlog), mode="legacy",
                                  read_timeout_seconds=CALL_TIMEOUT) as c:
                    await body(c, out)
        try:
            anyio.run(main)
        except BaseException as e:  # noqa: BLE001 - recorded, judged by the checks below
            while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
                e = e.exceptions[0]
            out.setdefault("error", f"{type(e).__name__}: {e}")
        out["browser_runs"] = browser_runs()
        out["tokens_end"] = stored("tokens")
        out["client"] = stored("client_info")

    async def read(c: Any) -> Any:
        r = await c.call_tool("read_file", {"path": HELLO})
        return r.structured_content

    async def first(c: Any, out: dict[str, Any]) -> None:
        out["protocol"], out["server"] = c.protocol_version, c.server_info and c.server_info.name
        out["tools"] = sorted(x.name for x in (await c.list_tools()).tools)
        out["read"] = await read(c)
        out["tokens_before"] = stored("tokens")
        out["browser_before_wait"] = browser_runs()
        await anyio.sleep(WAIT)
        try:
            out["read_after"] = await read(c)
        except Exception as e:  # noqa: BLE001
            out["after_error"] = f"{type(e).__name__}: {e}"

    async def second(c: Any, out: dict[str, Any]) -> None:
        out["read"] = await read(c)

    logf = lambda: [browser_log, logs / "oauth-mcp-remote-1.log", logs / "oauth-mcp-remote-2.log",  # noqa: E731
                    up_path.with_suffix(".log")]
    session(0, first)
    one = runs[0]

    def signed_in() -> None:
        check("protocol" in one, f"no session through mcp-remote: {one.get('error')}")
        check(one["protocol"] == "2025-11-25" and one["server"] == "machine-mcp",
              f"initialize: protocol {one['protocol']!r}, server {one['server']!r}")
        check(one.get("browser_before_wait") == 1, f"$BROWSER ran {one.get('browser_before_wait')} times, want once")
        check((one.get("client") or {}).get("client_id", "").startswith("mbc_"),
              f"no registered client stored: {short(one.get('client'))}")
        log = browser_log.read_text()
        check("POST answered 303" in log and "callback answered 200" in log,
              "the fake browser did not get the 303 to mcp-remote's callback")

    def calls() -> None:
        check("tools" in one, f"no tools/list: {one.get('error')}")
        check("read_file" in one["tools"], f"tools {one['tools']}")
        check_hello(work, one.get("read"), "first call")

    def refreshed() -> None:
        check("read_after" in one, f"the call after {WAIT}s failed: {one.get('after_error') or one.get('error')}")
        check_hello(work, one["read_after"], f"the call after {WAIT}s")
        before, after = one.get("tokens_before") or {}, one.get("tokens_end") or {}
        check(before.get("expires_in") == TTL, f"stored token expires_in {before.get('expires_in')}, want {TTL}")
        check(after.get("access_token") and after["access_token"] != before.get("access_token"),
              "the stored access token did not change: no refresh")
        check(after.get("refresh_token") and after["refresh_token"] != before.get("refresh_token"),
              "the stored refresh token did not rotate")
        check(one.get("browser_runs") == 1, f"$BROWSER ran {one.get('browser_runs')} times, want once (no new sign-in)")

    checks.run("mcp-remote (oauth): first run registers, signs in once through $BROWSER (consent form, 303 to its "
               "callback), initialize through the proxy", signed_in, logf)
    checks.run("mcp-remote (oauth): tools/list and read_file through the proxy", calls, logf)
    checks.run(f"mcp-remote (oauth): read_file after the access token expired ({TTL}s): refreshed (new access token, "
               "rotated refresh token), no new sign-in", refreshed, logf)

    def again() -> None:
        check(one.get("client"), "no first run to reuse")
        session(1, second)
        two = runs[1]
        check("read" in two, f"second run: {two.get('error')}")
        check_hello(work, two["read"], "second run")
        check(two["browser_runs"] == 1, f"$BROWSER ran again: {two['browser_runs']} runs in all, want 1")
        check((two.get("client") or {}).get("client_id") == one["client"]["client_id"],
              f"the client was registered again: {short(two.get('client'))}")

    checks.run("mcp-remote (oauth): a second run with the same MCP_REMOTE_CONFIG_DIR reuses the stored client and "
               "tokens (no browser), read_file", again, logf)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# the TypeScript SDK (ts-oauth.mjs)

def cmd_ts(work: Path, up_path: Path) -> int:
    up = load_up(up_path)
    node, modules = os.environ["INTEROP_NODE"], os.environ["INTEROP_NODE_MODULES"]
    log = work / "logs" / "oauth-ts.log"
    plan = json.dumps({"calls": [{"name": "read_file", "arguments": {"path": HELLO}}]})
    checks = Checks()
    out: dict[str, Any] = {}
    logf = lambda: [log, up_path.with_suffix(".log")]  # noqa: E731

    def run() -> None:
        p = subprocess.run([node, str(HERE / "ts-oauth.mjs"), modules, up["mcp_url"], str(WAIT * 1000)],
                           input=plan, capture_output=True, text=True, timeout=CALL_TIMEOUT * 2, check=False,
                           env={**os.environ, "INTEROP_ACCOUNT": up["account"], "INTEROP_PASSWORD": up["password"]})
        log.write_text(f"$ node ts-oauth.mjs {modules} {up['mcp_url']} {WAIT * 1000}\n{p.stderr}\n"
                       f"--- exit {p.returncode}; stdout:\n{short(p.stdout, 8000)}\n")
        try:
            out.update(json.loads(p.stdout))
        except json.JSONDecodeError:
            raise AssertionError(f"ts-oauth.mjs exit {p.returncode}: {short(p.stderr.strip(), 600)}") from None
        check(p.returncode == 0, f"ts-oauth.mjs exit {p.returncode}: {short(p.stderr.strip(), 600)}")
        wire = out["wire"]
        check(out["consents"] == 1 and not out["consent_errors"],
              f"consent page visits {out['consents']}, errors {out['consent_errors']}")
        check(out["registered"] and out["registered"]["client_id"].startswith("mbc_"), f"registered {out['registered']}")
        check(out.get("iss") == up["mcp_url"].split("/b/")[0], f"iss {out.get('iss')!r} in the redirect")
        check([w.get("grant") for w in wire if w.get("grant")][:1] == ["authorization_code"],
              f"token requests {[w.get('grant') for w in wire if w.get('grant')]}")
        check(out["protocol_version"] == "2025-11-25" and (out["server"] or {}).get("name") == "machine-mcp",
              f"initialize: {out['protocol_version']!r}, {out['server']}")
        check(out["session_id"], "no MCP-Session-Id")

    def calls() -> None:
        check(out.get("tools"), f"no session (see above) or tools/list failed: {out.get('tools_error')}")
        check("read_file" in out["tools"], f"tools {out['tools']}")
        r = out["before"][0]
        check("result" in r, f"read_file: {r.get('error')}")
        check_hello(work, r["result"].get("structuredContent"), "read_file")
        check(out["tokens"] and out["tokens"][0]["expires_in"] == TTL, f"tokens {out['tokens']}, want expires_in {TTL}")

    def refreshed() -> None:
        check(out.get("after"), "no session (see above)")
        r = out["after"][0]
        check("result" in r, f"read_file after {WAIT}s: {r.get('error')}")
        check_hello(work, r["result"].get("structuredContent"), f"read_file after {WAIT}s")
        wire = out["wire"]
        mark = next(i for i, w in enumerate(wire) if "mark" in w)
        old = next((w["bearer"] for w in reversed(wire[:mark]) if w.get("bearer")), None)
        later = wire[mark + 1:]
        # the first request with the expired token (the call, or a reconnecting GET stream) gets 401
        first = next((w for w in later if w.get("bearer")), {})
        grants = [(w.get("grant"), w.get("status")) for w in later if w.get("grant")]
        calls_after = [w for w in later if w.get("method") == "tools/call"]
        check(first.get("bearer") == old and first.get("status") == 401,
              f"the first request after expiry: {first}, want a 401 for the expired token")
        check(grants == [("refresh_token", 200)], f"token requests after expiry {grants}, want one refresh_token grant")
        check(calls_after and calls_after[-1]["status"] == 200 and calls_after[-1]["bearer"] != old,
              f"the call after expiry {calls_after[-1:]}: want 200 with the new token")
        check(len(out["tokens"]) == 2 and out["tokens"][1]["refresh"] != out["tokens"][0]["refresh"],
              f"saved tokens {out['tokens']}: want a second set with a rotated refresh token")
        check(out["consents"] == 1, f"consent page visits {out['consents']}, want 1 (no new sign-in)")

    checks.run("ts-sdk (oauth): 401, discovery, registration (RFC 7591), headless consent (303 with code, state, "
               "iss), finishAuth, initialize", run, logf)
    checks.run("ts-sdk (oauth): tools/list and read_file with the access token", calls, logf)
    checks.run(f"ts-sdk (oauth): after the access token expired ({TTL}s): 401, refresh_token grant (rotated), the call "
               "retried with the new token, no new sign-in", refreshed, logf)
    checks.run("ts-sdk (oauth): DELETE ends the session",
               lambda: check(out.get("terminated") is True, f"terminateSession: {out.get('terminated')}"), logf)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# the Python SDK: one OAuthClientProvider (one token storage), legacy and then 2026-07-28

def cmd_python(work: Path, up_path: Path) -> int:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

    up = load_up(up_path)
    log = work / "logs" / "oauth-python.log"
    logf = lambda: [log, up_path.with_suffix(".log")]  # noqa: E731
    browser = fake_browser()
    checks = Checks()

    class Storage:  # the SDK's TokenStorage protocol, in memory, recording every write
        def __init__(self) -> None:
            self.tokens: OAuthToken | None = None
            self.client: OAuthClientInformationFull | None = None
            self.saved: list[OAuthToken] = []
            self.registrations = 0

        async def get_tokens(self) -> OAuthToken | None:
            return self.tokens

        async def set_tokens(self, tokens: OAuthToken) -> None:
            self.tokens = tokens
            self.saved.append(tokens)

        async def get_client_info(self) -> OAuthClientInformationFull | None:
            return self.client

        async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
            self.client = client_info
            self.registrations += 1

    storage = Storage()
    consent: dict[str, Any] = {"count": 0}

    async def redirect_handler(url: str) -> None:  # the person at the browser
        consent["count"] += 1
        consent["location"] = await anyio.to_thread.run_sync(browser.approve, url, up["account"], up["password"])

    async def callback_handler() -> AuthorizationCodeResult:
        q = urllib.parse.parse_qs(urllib.parse.urlparse(consent.pop("location")).query)
        return AuthorizationCodeResult(code=q["code"][0], state=q.get("state", [None])[0], iss=q.get("iss", [None])[0])

    provider = OAuthClientProvider(
        server_url=up["mcp_url"],
        client_metadata=OAuthClientMetadata(
            client_name="machine-mcp interop (Python SDK)", redirect_uris=["http://127.0.0.1:9/callback"],
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler)

    wire: list[dict[str, Any]] = []
    mcp_path = urllib.parse.urlparse(up["mcp_url"]).path

    async def record(response: Any) -> None:
        req = response.request
        entry: dict[str, Any] = {"http": req.method, "path": req.url.path, "status": response.status_code,
                                 "session": req.headers.get("mcp-session-id")}
        auth = req.headers.get("authorization", "")
        entry["bearer"] = auth[7:] if auth.startswith("Bearer ") else None
        body = req.content if req.method == "POST" else b""
        if req.url.path.endswith("/token"):
            entry["grant"] = urllib.parse.parse_qs(body.decode()).get("grant_type", [None])[0]
        elif body.startswith(b"{") and req.url.path == mcp_path:
            entry["method"] = json.loads(body).get("method", "(response)")
        wire.append(entry)
        with open(log, "a") as f:
            shown = {**entry, "bearer": (entry["bearer"] or "")[:12] or None}
            f.write(json.dumps(shown) + "\n")

    def mark(what: str) -> None:
        wire.append({"mark": what})
        with open(log, "a") as f:
            f.write(f"--- {what}\n")

    results: dict[str, Any] = {}

    async def session(mode: str, body: Callable[[Any], Any]) -> None:
        http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(CALL_TIMEOUT, read=300),
                                  event_hooks={"response": [record]})
        with anyio.fail_after(CALL_TIMEOUT * 2):
            async with http, Client(streamable_http_client(up["mcp_url"], http_client=http), mode=mode,
                                    read_timeout_seconds=CALL_TIMEOUT) as c:
                await body(c)

    async def read(c: Any) -> Any:
        return (await c.call_tool("read_file", {"path": HELLO})).structured_content

    async def legacy(c: Any) -> None:
        results["legacy"] = {"protocol": c.protocol_version, "server": c.server_info and c.server_info.name}
        results["tools"] = sorted(x.name for x in (await c.list_tools()).tools)
        results["read"] = await read(c)
        mark(f"legacy: waiting {WAIT}s")
        await anyio.sleep(WAIT)
        results["read_after"] = await read(c)

    async def modern(c: Any) -> None:
        results["modern"] = {"protocol": c.protocol_version, "initialized": c.session.initialize_result is not None}
        results["discover"] = await c.session.send_discover("2026-07-28")
        results["modern_read"] = await read(c)
        mark(f"2026-07-28: waiting {WAIT}s")
        await anyio.sleep(WAIT)
        results["modern_read_after"] = await read(c)

    def phase(name: str) -> list[dict[str, Any]]:
        """The wire of one phase: legacy (to its wait), legacy-after, modern (to its wait), modern-after."""
        names = ["legacy", "legacy-after", "modern", "modern-after"]
        marks = [i for i, w in enumerate(wire) if "mark" in w]
        bounds = [-1, *marks, len(wire)] + [len(wire)] * (3 - len(marks))
        i = names.index(name)
        return wire[bounds[i] + 1:bounds[i + 1]]

    def grants(ws: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
        return [(w.get("grant"), w["status"]) for w in ws if "grant" in w]

    def mcp_bearers(ws: list[dict[str, Any]]) -> list[str | None]:
        return [w["bearer"] for w in ws if w["path"] == mcp_path]

    issued = lambda: {t.access_token for t in storage.saved}  # noqa: E731

    def run_legacy() -> None:
        try:
            anyio.run(session, "legacy", legacy)
        finally:
            results["consents_legacy"] = consent["count"]
        ws = phase("legacy")
        check(results["legacy"]["protocol"] == "2025-11-25" and results["legacy"]["server"] == "machine-mcp",
              f"initialize: {results['legacy']}")
        check(consent["count"] == 1 and storage.registrations == 1,
              f"consents {consent['count']}, registrations {storage.registrations}, want 1 each")
        check(grants(ws) == [("authorization_code", 200)], f"token requests {grants(ws)}")
        check(storage.saved and storage.saved[0].expires_in == TTL and storage.saved[0].refresh_token,
              f"first token: expires_in {storage.saved[0].expires_in if storage.saved else None}, want {TTL}, "
              "and a refresh token")

    def legacy_calls() -> None:
        check("tools" in results, "no session (see above)")
        check("read_file" in results["tools"], f"tools {results['tools']}")
        check_hello(work, results["read"], "read_file")

    def legacy_refresh() -> None:
        check("read_after" in results, "no call after the wait (see above)")
        check_hello(work, results["read_after"], f"read_file after {WAIT}s")
        ws = phase("legacy-after")
        check(("refresh_token", 200) in grants(ws) and all(g == "refresh_token" for g, _ in grants(ws)),
              f"token requests after expiry {grants(ws)}, want refresh_token grants only")
        before = set(mcp_bearers(phase("legacy")))
        after = [b for b in mcp_bearers(ws) if b]
        check(after and not (set(after) & before) and set(after) <= issued(),
              "the call after expiry did not use a refreshed token")
        check(consent["count"] == 1, f"consents {consent['count']}, want 1 (no new sign-in)")

    checks.run("python-sdk (oauth, legacy): 401, discovery, registration, sign-in through the redirect and callback "
               "handlers (one consent), initialize 2025-11-25", run_legacy, logf)
    checks.run("python-sdk (oauth, legacy): tools/list and read_file", legacy_calls, logf)
    checks.run(f"python-sdk (oauth, legacy): read_file after the access token expired ({TTL}s): refresh_token grant, "
               "no new sign-in", legacy_refresh, logf)

    def run_modern() -> None:
        check(storage.saved, "no tokens from the legacy session to share")
        last_legacy = storage.saved[-1].access_token
        mark("2026-07-28 session: the same provider")
        anyio.run(session, "2026-07-28", modern)
        check(results["modern"]["protocol"] == "2026-07-28" and not results["modern"]["initialized"],
              f"{results['modern']}: want 2026-07-28 with no initialize")
        ws = phase("modern")
        methods = [w.get("method") for w in ws if w.get("method")]
        check("server/discover" in methods and "initialize" not in methods, f"MCP methods {methods}")
        d = results["discover"]
        check("2026-07-28" in (d.get("supportedVersions") or []), f"server/discover: {short(d)}")
        check(not any(w["session"] for w in ws), "a request carried MCP-Session-Id (2026-07-28 is stateless)")
        check(consent["count"] == 1 and storage.registrations == 1 and all(g == "refresh_token" for g, _ in grants(ws)),
              f"consents {consent['count']}, registrations {storage.registrations}, token requests {grants(ws)}: "
              "want the legacy session's client and grant")
        first = mcp_bearers(ws)[0]
        check(first == last_legacy or (grants(ws) and first in issued()),
              "the first 2026-07-28 request did not carry the legacy session's (or its refreshed) token")
        check(all(w["status"] == 200 for w in ws if w.get("method")), f"statuses {[(w.get('method'), w['status']) for w in ws]}")
        check_hello(work, results["modern_read"], "read_file")

    def modern_refresh() -> None:
        check("modern_read_after" in results, "no call after the wait (see above)")
        check_hello(work, results["modern_read_after"], f"read_file after {WAIT}s")
        ws = phase("modern-after")
        check(("refresh_token", 200) in grants(ws) and all(g == "refresh_token" for g, _ in grants(ws)),
              f"token requests after expiry {grants(ws)}, want refresh_token grants only")
        check(consent["count"] == 1, f"consents {consent['count']}, want 1 (no new sign-in)")
        check(not any(w["session"] for w in ws), "a request carried MCP-Session-Id")

    checks.run("python-sdk (oauth, 2026-07-28): the same provider and token storage, no new sign-in: server/discover "
               "answered (2026-07-28), no session, no initialize, read_file", run_modern, logf)
    checks.run(f"python-sdk (oauth, 2026-07-28): read_file after the access token expired ({TTL}s): refresh_token "
               "grant, no new sign-in", modern_refresh, logf)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# the consent page in headless Chromium (consent-browser.mjs)

def cmd_browser(work: Path, up_path: Path, artifacts: Path) -> int:
    up = load_up(up_path)
    node, modules = os.environ["INTEROP_NODE"], os.environ["INTEROP_NODE_MODULES"]
    chromium = os.environ.get("INTEROP_CHROMIUM", "/usr/bin/chromium")
    log = work / "logs" / "oauth-chromium.log"
    logf = lambda: [log, up_path.with_suffix(".log")]  # noqa: E731
    checks = Checks()
    out: dict[str, Any] = {}

    def page() -> None:
        check(os.access(chromium, os.X_OK),
              f"no Chromium at {chromium} (Debian: apt-get install chromium, as scripts/test.sh does; or set "
              "MACHINE_MCP_INTEROP_CHROMIUM)")
        p = subprocess.run([node, str(HERE / "consent-browser.mjs"), modules, up["mcp_url"], str(artifacts)],
                           capture_output=True, text=True, timeout=CALL_TIMEOUT * 2, check=False,
                           env={**os.environ, "INTEROP_ACCOUNT": up["account"], "INTEROP_PASSWORD": up["password"],
                                "INTEROP_CHROMIUM": chromium})
        log.write_text(f"$ node consent-browser.mjs {modules} {up['mcp_url']} {artifacts}\n{p.stderr}\n"
                       f"--- exit {p.returncode}; stdout:\n{short(p.stdout, 8000)}\n")
        try:
            out.update(json.loads(p.stdout))
        except json.JSONDecodeError:
            raise AssertionError(f"consent-browser.mjs exit {p.returncode}: {short(p.stderr.strip(), 600)}") from None
        check("consent page" in out["steps"], f"the page was not shown: {out.get('error')}")
        check(out["page_status"] == 200, f"GET the authorization URL: HTTP {out['page_status']}")
        check("machine-mcp interop (Chromium)" in (out.get("heading") or ""), f"heading {out.get('heading')!r}")
        check(out["form_method"] == "post" and out["form_action"] == "/oauth/authorize",
              f"form {out['form_method']} {out['form_action']}")
        check(out["has_account"] and out["has_password"], "no visible account or password field")
        check(out["buttons"] == ["approve:Allow", "deny:Deny"], f"buttons {out['buttons']}")
        check(out["cookie"] == {"path": "/oauth/authorize", "httpOnly": True, "sameSite": "Strict"},
              f"consent cookie {out['cookie']}")
        shot = Path(out["screenshot"])
        check(shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out["screenshot_bytes"] > 10_000,
              f"screenshot {shot}: not a PNG of a page")

    def wrong() -> None:
        check("wrong password" in out.get("steps", []), f"not signed in with a wrong password: {out.get('error')}")
        check(out["wrong_status"] == 401 and "Wrong account name or password" in (out.get("wrong_error") or ""),
              f"a wrong password answered {out['wrong_status']}: {out.get('wrong_error')!r}, want 401 and the page "
              f"again (the form POST carried Origin: {out.get('post_origin')}, Sec-Fetch-Site: "
              f"{out.get('post_sec_fetch_site')})")
        check(out.get("wrong_account_kept") == up["account"], f"account field {out.get('wrong_account_kept')!r}")

    def allowed() -> None:
        check("allow_status" in out or "error" in out, "not reached: no sign-in form after the wrong password (see above)")
        check("approved" in out.get("steps", []),
              f"Allow: HTTP {out.get('allow_status')} {out.get('allow_error') or out.get('error') or ''}".strip())
        cb = out["callback"] or {}
        check(out["landed"] == out["redirect_uri"], f"the browser is at {out['landed']}, want {out['redirect_uri']}")
        check(cb.get("code", "").startswith("mbk_") and out["state_ok"] and cb.get("iss") == out["issuer"],
              f"callback parameters {cb}, state ok {out['state_ok']}")

    def token() -> None:
        check("approved" in out.get("steps", []), "not reached: no code (see above)")
        check("mcp" in out.get("steps", []), f"no MCP session with the token: {out.get('error')}")
        check(out["token_type"] == "Bearer" and out["expires_in"] == TTL, f"token {out['token_type']} {out['expires_in']}")
        check(out["protocol_version"] == "2025-11-25" and out["server"] == "machine-mcp",
              f"initialize {out['protocol_version']} {out['server']}")
        check("read_file" in out["tools"], f"tools {out['tools']}")
        check_hello(work, out["read"], "read_file")

    checks.run("chromium (oauth): the consent page in headless Chromium (form, account and password fields, Allow "
               "and Deny, the HttpOnly SameSite=Strict consent cookie); screenshot kept", page, logf)
    if out.get("screenshot"):
        print(f"    screenshot: {out['screenshot']}")
    checks.run("chromium (oauth): a wrong password shows the page again (401, the reason, the account kept)", wrong, logf)
    checks.run("chromium (oauth): the form filled and Allow clicked in the browser lands on the redirect URI with "
               "code, state and iss", allowed, logf)
    checks.run("chromium (oauth): the code exchanges (PKCE) for an access token that works on the MCP URL "
               "(initialize, tools/list, read_file)", token, logf)
    return 1 if checks.failed else 0


# ---------------------------------------------------------------------------------------------
# the conformance suite's authorization-server scenarios

def cmd_authorization(work: Path, up_path: Path) -> int:
    up = load_up(up_path)
    node, modules = os.environ["INTEROP_NODE"], Path(os.environ["INTEROP_NODE_MODULES"])
    logs = work / "logs"
    log, browser_log = logs / "oauth-authorization.log", logs / "oauth-authorization-browser.log"
    outdir = work / "conformance-authorization"
    label = "relay conformance authorization (0.2.0-alpha.12)"
    logf = lambda: [log, browser_log, up_path.with_suffix(".log")]  # noqa: E731
    checks = Checks()
    state: dict[str, Any] = {}

    def run() -> None:
        prm, asm = discover(up["mcp_url"])
        port = free_port()
        # the suite's callback is http://127.0.0.1:PORT/callback, registered for it beforehand
        client = register(asm, "machine-mcp interop (conformance authorization)", f"http://127.0.0.1:{port}/callback",
                          ["authorization_code"])
        argv = [node, str(modules / CONF26), "authorization", "--url", asm["issuer"], "--client-id",
                client["client_id"], "--resource", prm["resource"], "--port", str(port), "-o", str(outdir)]
        env = {**os.environ, "FAKE_BROWSER_LOG": str(browser_log), "FAKE_BROWSER_ACCOUNT": up["account"],
               "FAKE_BROWSER_PASSWORD": up["password"]}
        with open(log, "w") as f:
            f.write("$ " + " ".join(argv) + "\n")
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
            browsers: list[subprocess.Popen[bytes]] = []
            timer = threading.Timer(120, proc.kill)
            timer.start()
            try:
                assert proc.stdout
                for line in proc.stdout:
                    f.write(line)
                    f.flush()
                    # the suite prints the authorization URL for a person to open: the fake browser does
                    if line.startswith(asm["authorization_endpoint"] + "?"):
                        browsers.append(subprocess.Popen([sys.executable, str(FAKE_BROWSER), line.strip()], env=env))
                state["rc"] = proc.wait()
            finally:
                timer.cancel()
                for b in browsers:
                    b.wait(timeout=30)
        state["browsers"] = [b.returncode for b in browsers]
        text = log.read_text()
        ran = re.findall(r"^=== Running scenario: (\S+) ===", text, re.M)
        check(ran == AUTHORIZATION_SCENARIOS, f"scenarios run {ran}, want {AUTHORIZATION_SCENARIOS} (exit {state['rc']})")
        check(state["browsers"] == [0], f"fake browser runs (exit codes) {state['browsers']}, want one that succeeded")
        for name in ran:
            files = sorted(outdir.glob(f"authorization-server-{name}-*/checks.json"))
            state[name] = json.loads(files[-1].read_text()) if files else None
        verdicts = [not bad_of(state.get(n)) for n in ran]
        if all(verdicts):
            check(state["rc"] == 0, f"suite exit {state['rc']} although every check passed")

    def bad_of(items: list[dict[str, Any]] | None) -> list[str]:
        if not items:
            return ["no checks.json"]
        return [f"{c.get('status')} {c.get('id')}: {c.get('errorMessage', '')}" for c in items
                if c.get("status") not in ("SUCCESS", "INFO")]

    def scenario(name: str) -> Callable[[], None]:
        def go() -> None:
            check(name in state, "not run (see above)")
            bad = bad_of(state[name])
            check(not bad, "; ".join(bad)[:2000])
        return go

    checks.run(f"{label}: the {len(AUTHORIZATION_SCENARIOS)} authorization-server scenarios ran (authorization "
               "request approved on the consent page)", run, logf)
    for name in AUTHORIZATION_SCENARIOS:
        checks.run(f"{label}: {name}", scenario(name), logf)
    return 1 if checks.failed else 0


def main(argv: list[str]) -> int:
    if len(argv) in (2, 3) and argv[0] == "token":
        return cmd_token(Path(argv[1]), argv[2] if len(argv) == 3 else None)
    if len(argv) == 3 and argv[0] in ("mcp-remote", "ts", "python", "authorization"):
        fn = {"mcp-remote": cmd_mcp_remote, "ts": cmd_ts, "python": cmd_python, "authorization": cmd_authorization}
        return fn[argv[0]](Path(argv[1]), Path(argv[2]))
    if len(argv) == 4 and argv[0] == "browser":
        return cmd_browser(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
