"""Benchmark section 8: managed jobs (issue 16).

8a. Acceptance latency of `start_job` (a one-step plan `["true"]`, a fresh idempotency_key per
    call) on a warm `machine-mcp stdio --state-dir DIR` session: request written → response
    read, p50/p99. The acceptance validates the plan, writes the job directory (two fsynced
    files and a rename) and starts the detached runner. Reference in the same run, interleaved
    call by call: `run_process ["true"]` on the same session (a spawn and wait of the same
    program). The runners are let finish between calls, so at most a few run at once.
8b. Visibility: the time from a step's exit to `read_job` showing it. Each job's one step is
    `sh -c 'sleep 0.2; date +%s%N'`: the last thing it does is print the wall clock. The client
    long-polls `read_job` (`wait_ms` 30000, `after_version`) and takes the wall clock when the
    response shows the step exited; the difference is the visibility latency (step exit → runner
    records it → the poll notices the new version → the response). Reference: the same command
    through `run_process`, from its printed clock to the response.

Run alone: python3 bench/jobs.py --bin target/release/machine-mcp [--calls 200] [--jobs 30]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from common import Session, fmt_ms, log, ms, pct, status

STEP = "sleep 0.2; date +%s%N"


def _sc(line):
    return json.loads(line)["result"]["structuredContent"]


def bench_jobs(binary, workspace, calls, jobs):
    state = tempfile.mkdtemp(prefix="mcp-bench-jobs-state-")
    s = Session(argv=[binary, "stdio", "--workspace", workspace, "--state-dir", state])
    try:
        accept, ref = [], []
        for i in range(calls + 10):
            plan = {"name": f"b{i}", "idempotency_key": f"accept-{i}", "steps": [{"argv": ["true"]}]}
            ns, line = s.raw_request("tools/call", {"name": "start_job", "arguments": plan})
            sc = _sc(line)
            assert sc["state"] in ("queued", "running", "succeeded"), sc
            ns_ref, _ = s.raw_request("tools/call", {"name": "run_process", "arguments": {"argv": ["true"]}})
            # Let the runner finish, so runners do not pile up behind the run slots.
            _, line = s.raw_request("tools/call", {"name": "read_job", "arguments": {
                "job_id": sc["job_id"], "wait_ms": 5000, "after_version": sc["version"]}})
            for _ in range(50):
                v = _sc(line)
                if v["state"] == "succeeded":
                    break
                _, line = s.raw_request("tools/call", {"name": "read_job", "arguments": {
                    "job_id": sc["job_id"], "wait_ms": 5000, "after_version": v["version"]}})
            if i >= 10:  # the first calls warm the session and the page cache
                accept.append(ns)
                ref.append(ns_ref)
        seen, seen_ref = [], []
        for i in range(jobs):
            plan = {"name": f"v{i}", "idempotency_key": f"visible-{i}",
                    "steps": [{"argv": ["sh", "-c", STEP]}]}
            _, line = s.raw_request("tools/call", {"name": "start_job", "arguments": plan})
            sc = _sc(line)
            version, job = sc["version"], sc["job_id"]
            while True:
                _, line = s.raw_request("tools/call", {"name": "read_job", "arguments": {
                    "job_id": job, "wait_ms": 30000, "after_version": version}})
                now = time.time_ns()
                v = _sc(line)
                version = v["version"]
                steps = v["steps"]
                if steps and steps[0]["state"] == "exited":
                    printed = int(steps[0]["stdout"].strip())
                    seen.append(now - printed)
                    break
                assert v["state"] not in ("failed", "interrupted"), v
            _, line = s.raw_request("tools/call", {"name": "run_process", "arguments": {"argv": ["sh", "-c", STEP]}})
            now = time.time_ns()
            seen_ref.append(now - int(_sc(line)["stdout"].strip()))
        return {"accept": accept, "ref": ref, "seen": seen, "seen_ref": seen_ref}
    finally:
        s.close()
        shutil.rmtree(state, ignore_errors=True)


def report(r):
    rows, det = [], []
    a50, a99 = ms(pct(r["accept"], 50)), ms(pct(r["accept"], 99))
    r50, r99 = ms(pct(r["ref"], 50)), ms(pct(r["ref"], 99))
    rows.append(
        f"| 8 | `start_job` acceptance (one-step plan), p50 / p99 ({len(r['accept'])} calls) "
        f"| {fmt_ms(a50)} / {fmt_ms(a99)} ms | `run_process [\"true\"]` on the same session: "
        f"{fmt_ms(r50)} / {fmt_ms(r99)} ms | {a50 / r50:.2f}x / {a99 / r99:.2f}x | p50 ≤ 2x run_process "
        f"| {status(a50 <= 2 * r50)} |"
    )
    s50, s99 = ms(pct(r["seen"], 50)), ms(pct(r["seen"], 99))
    q50, q99 = ms(pct(r["seen_ref"], 50)), ms(pct(r["seen_ref"], 99))
    rows.append(
        f"| 8 | step exit → `read_job` (long-poll) shows it, p50 / p99 ({len(r['seen'])} jobs) "
        f"| {fmt_ms(s50)} / {fmt_ms(s99)} ms | the same step through `run_process`, exit → result: "
        f"{fmt_ms(q50)} / {fmt_ms(q99)} ms | {s50 / q50:.2f}x / {s99 / q99:.2f}x | p50 < 50 ms "
        f"| {status(s50 < 50)} |"
    )
    det.append("## managed jobs, details")
    det.append("")
    det.append(
        "Acceptance: validation, the job directory (plan and status written 0600 and fsynced, "
        "then renamed into place), the detached runner started and its identity recorded. "
        "Visibility: wall clock printed by the step as its last act vs the client's wall clock when "
        "the `read_job` long-poll answered with the step exited (the runner records the exit, the "
        "poll reads status files every 25 ms)."
    )
    det.append("")
    return rows, det


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=30)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-bench-jobs-") as ws:
        r = bench_jobs(os.path.abspath(a.bin), ws, a.calls, a.jobs)
    rows, det = report(r)
    print("\n".join(rows + [""] + det))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    log("jobs benchmark ...")
    main()
