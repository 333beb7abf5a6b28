#!/usr/bin/env python3
"""A headless stand-in for a person at a browser, for tests/interop/run.sh: signs in on the relay's
OAuth consent page and approves, as a person would with the page `GET /oauth/authorize` renders.

    BROWSER=tests/interop/fake-browser.py   (xdg-open runs `$BROWSER URL` when there is no display)
    fake-browser.py AUTHORIZATION-URL

Environment: FAKE_BROWSER_ACCOUNT, FAKE_BROWSER_PASSWORD (the account to sign in with; `up --json`
prints the owner's), FAKE_BROWSER_LOG (a file to append what it did to, one line per step: each
run starts with a `GET` line, so the number of runs is the number of those lines).

What it does: GET the consent page (keeping the `mb_consent` cookie it sets, as a browser does),
take the form's hidden `request` field, POST the form back to the form's action with the account,
the password and `action=approve` (and the cookie), and expect a 303 whose Location is the
client's redirect URI with a `code`; then GET that Location, which is the client's loopback
callback, as the browser would follow the redirect. Exits 0 when the callback answered 2xx.
Standard library only (xdg-open runs it with whatever `python3` is on PATH); oauth.py imports its
`approve` for its own headless sign-ins.
"""

from __future__ import annotations

import html
import http.cookiejar
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request


def log(line: str) -> None:
    path = os.environ.get("FAKE_BROWSER_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"fake-browser[{os.getpid()}]: {line}\n")


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None  # surface the 303 (and its Location) instead of following it


def field(page: str, pattern: str, what: str) -> str:
    m = re.search(pattern, page)
    if not m:
        raise RuntimeError(f"the consent page has no {what}")
    return html.unescape(m.group(1))


def approve(url: str, account: str, password: str) -> str:
    """Sign in on the consent page at `url` and approve: the Location of the relay's 303 (the
    client's redirect URI with `code`, `state` and `iss`). Raises on anything else."""
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirects)
    log(f"GET {url}")
    with browser.open(url, timeout=30) as r:
        page = r.read().decode()
        log(f"consent page {r.status}, cookies {sorted(c.name for c in jar)}")
    action = field(page, r'<form method="post" action="([^"]+)"', "form")
    request = field(page, r'<input type="hidden" name="request" value="([^"]*)"', "hidden request field")
    form = {"request": request, "account": account, "password": password, "action": "approve"}
    target = urllib.parse.urljoin(url, action)
    log(f"POST {target} (account {account}, action=approve)")
    post = urllib.request.Request(target, data=urllib.parse.urlencode(form).encode(),
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with browser.open(post, timeout=30) as r:
            raise RuntimeError(f"the consent POST answered {r.status}, not a redirect: {r.read()[:300]!r}")
    except urllib.error.HTTPError as e:
        location = e.headers.get("Location")
        log(f"POST answered {e.code}, Location {location}")
        if e.code != 303 or not location:
            raise RuntimeError(f"the consent POST answered {e.code} (Location {location}), want 303: "
                               f"{e.read()[:300]!r}") from None
    if "code" not in urllib.parse.parse_qs(urllib.parse.urlparse(location).query):
        raise RuntimeError(f"no code in the redirect: {location}")
    return location


def main(url: str) -> int:
    location = approve(url, os.environ.get("FAKE_BROWSER_ACCOUNT", "owner"),
                       os.environ.get("FAKE_BROWSER_PASSWORD", ""))
    # follow the redirect to the client's loopback callback, as the browser would
    with urllib.request.urlopen(location, timeout=30) as r:
        log(f"callback answered {r.status}")
        return 0 if 200 <= r.status < 300 else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(main(sys.argv[1]))
    except Exception as e:  # noqa: BLE001 - logged for the test to show, then a failure exit
        log(f"failed: {type(e).__name__}: {e}")
        sys.exit(1)
