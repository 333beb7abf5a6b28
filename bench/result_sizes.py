#!/usr/bin/env python3
"""Characters sent per call (issue 14): for each binary given, the size of the JSON-RPC response
line and of the result's text block (what most hosts show the model) for a default `read_file`
of a 4 KiB and of a 1 MiB file, and for the 1 MiB file asked for explicitly (`max_bytes`).

    python3 bench/result_sizes.py BEFORE_BINARY AFTER_BINARY

Prints a Markdown table. Standard library only; the files are the same source-like text as
`bench/driver.py`'s read_file section. Sizes do not depend on the build profile."""

import json
import os
import subprocess
import sys
import tempfile

LINE = b"    let value = compute(alpha, beta, gamma); // a line of plausible code text\n"


def make_text(size):
    data = (LINE * (size // len(LINE) + 1))[: size - 1] + b"\n"
    assert len(data) == size
    return data


def measure(binary, workspace, calls):
    p = subprocess.Popen([binary, "stdio", "--workspace", workspace], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def request(rid, method, params):
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode())
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            msg = json.loads(line)
            if msg.get("id") == rid:
                return line, msg

    request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "result-sizes", "version": "0"}})
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    out = []
    for i, args in enumerate(calls, 1):
        line, msg = request(i, "tools/call", {"name": "read_file", "arguments": args})
        res = msg["result"]
        text = res["content"][0]["text"]
        content = (res.get("structuredContent") or {}).get("content", "")
        out.append({"line_bytes": len(line) - 1, "text_chars": len(text),
                    "content_bytes": len(content.encode()), "truncated": res["structuredContent"].get("truncated")})
    p.stdin.close()
    p.wait(timeout=10)
    return out


def main():
    binaries = sys.argv[1:]
    if not binaries:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as ws:
        for name, size in [("small.rs", 4096), ("big.rs", 1 << 20)]:
            with open(os.path.join(ws, name), "wb") as f:
                f.write(make_text(size))
        calls = [("4 KiB file, default", {"path": "small.rs"}),
                 ("1 MiB file, default", {"path": "big.rs"}),
                 ("1 MiB file, max_bytes 1048576", {"path": "big.rs", "max_bytes": 1 << 20})]
        results = [measure(b, ws, [c[1] for c in calls]) for b in binaries]
    print("| read_file call | " + " | ".join(f"{os.path.basename(b)}: response line bytes / text block characters / content bytes" for b in binaries) + " |")
    print("|---|" + "---|" * len(binaries))
    for k, (label, _) in enumerate(calls):
        cells = [f"{r[k]['line_bytes']:,} / {r[k]['text_chars']:,} / {r[k]['content_bytes']:,}{' (truncated)' if r[k]['truncated'] else ''}" for r in results]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
