#!/usr/bin/env python3
"""Output stream for the process-throughput benchmark (bench/processes.py).

    producer.py BYTES [--line-len 100] [--credit FIFO --window BYTES]

Writes BYTES bytes to stdout as lines of LINE_LEN bytes ((LINE_LEN - 1) x 'a' and a newline), in
writes of up to 256 KiB, then exits 0.

With --credit, the stream is paced by its reader: the reader writes its read position (a decimal
byte offset and a newline) to the FIFO after every read, and the producer never gets more than
--window bytes ahead of the newest position it has seen. A server that keeps only the newest
W bytes of a stream therefore never drops any when the window is at most W. Without --credit it
writes as fast as the pipe takes it.
"""

import argparse
import os
import select
import sys

CHUNK = 256 * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bytes", type=int)
    ap.add_argument("--line-len", type=int, default=100)
    ap.add_argument("--credit")
    ap.add_argument("--window", type=int, default=1 << 20)
    a = ap.parse_args()
    line = b"a" * (a.line_len - 1) + b"\n"
    block = line * (CHUNK // a.line_len + 1)
    out = sys.stdout.fileno()
    total = a.bytes
    produced = 0
    acked = 0
    fifo = None
    if a.credit:
        fifo = os.open(a.credit, os.O_RDONLY | os.O_NONBLOCK)
    pending = b""
    while produced < total:
        n = min(CHUNK, total - produced)
        if fifo is not None:
            # Take every position the reader has sent (non-blocking); wait for a newer one while
            # less than a line of the window is left.
            while True:
                try:
                    data = os.read(fifo, 65536)
                except BlockingIOError:
                    data = None
                if data == b"":
                    return 1  # the reader closed its end: it is gone
                if data:
                    pending += data
                    *done, pending = pending.split(b"\n")
                    for d in done:
                        if d:
                            acked = max(acked, int(d))
                room = acked + a.window - produced
                if room >= min(a.line_len, total - produced):
                    break
                select.select([fifo], [], [], 1.0)
            # Whole lines only, so the stream's line structure does not depend on the pacing.
            n = min(n, room)
            if n < total - produced:
                n -= n % a.line_len
        # produced is a multiple of line_len (except before the last write): block[:n] continues
        # the stream exactly.
        view = memoryview(block)[:n]
        while view:
            view = view[os.write(out, view):]
        produced += n
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(1)
