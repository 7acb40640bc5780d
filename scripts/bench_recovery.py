#!/usr/bin/env python3
"""Time to recover after a crash with a backlog (issue 15, benchmarks).

Starts `airlock up` (release build, SQLite unless --database-url) with the
trivial worker, queues N runs over HTTP while the executor is held back
(AIRLOCK_MAX_CONCURRENT=1 and a worker that sleeps), SIGKILLs the server
mid-backlog, starts it again on the same data, and measures from the second
spawn:

  - ready:    the first 200 from /readyz (migrations, startup recovery done);
  - first:    the first run that reaches a terminal state after the restart;
  - drained:  every run terminal (the backlog worked off at the node's
              concurrency, AIRLOCK_MAX_CONCURRENT on restart).

It also counts outcomes: runs in flight at the kill end `unknown` (DUR-2:
never silently repeated), the rest `succeeded`; none lost.

  scripts/bench_recovery.py [--runs 1000] [--concurrency 4] [--binary PATH]
"""

import argparse
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs as br  # noqa: E402

SLEEP_RUN_SH = "sleep 0.2\necho '{}' > /airlock/output/result.json\n"


def states(client: br.Client, ids: list) -> dict:
    out = {}
    for i in ids:
        st, raw = client.request("GET", f"/v1/runs/{i}")
        if st != 200:
            raise br.BenchError(f"GET run {i}: {st} {raw[:200]!r}")
        out[i] = json.loads(raw)["run"]["state"]
    return out


TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "blocked", "unknown"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--binary", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.binary:
        br.AIRLOCK = Path(args.binary).resolve()
    env = br.Env(args.keep)
    (env.workers / "trivial" / "run.sh").write_text(SLEEP_RUN_SH)
    data = env.data_dir("recovery")
    try:
        # Queue the backlog with one slot, so that most of it is still
        # queued when the server is killed.
        srv = br.Server(env, "before", data, args.database_url, 1)
        srv.wait_ready()
        key = srv.key
        c = br.Client(srv.port, key)
        ids = []
        for n in range(args.runs):
            st, raw = c.request("POST", "/v1/workers/trivial/runs", {"input": {}})
            if st != 201:
                raise br.BenchError(f"create {n}: {st} {raw[:200]!r}")
            ids.append(json.loads(raw)["run"]["id"])
        c.close()
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        srv.log.close()

        t0 = time.perf_counter()
        srv2 = br.Server(env, "after", data, args.database_url, args.concurrency)
        ready_ms = srv2.wait_ready()
        c = br.Client(srv2.port, key)
        first_ms = None
        left = set(ids)
        while left:
            if time.perf_counter() - t0 > 1800:
                raise br.BenchError(f"{len(left)} runs not terminal after 30 min")
            srv2.check_alive()
            done = {i for i, s in states(c, sorted(left)[:200]).items() if s in TERMINAL}
            if done and first_ms is None:
                first_ms = (time.perf_counter() - t0) * 1000
            left -= done
            if left:
                time.sleep(0.2)
        drained_s = time.perf_counter() - t0
        final = states(c, ids)
        c.close()
        srv2.close()
        counts = {}
        for s in final.values():
            counts[s] = counts.get(s, 0) + 1
        print(f"| runs queued | killed with | ready ms | first terminal ms | all terminal s "
              f"| runs/s after restart | outcomes |")
        print("|---:|---|---:|---:|---:|---:|---|")
        print(f"| {args.runs} | SIGKILL | {ready_ms:.0f} | {first_ms or 0:.0f} | {drained_s:.1f} "
              f"| {args.runs / drained_s:.1f} | "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + " |")
        print(f"(concurrency after restart {args.concurrency}; worker sleeps 0.2 s; "
              f"database {'PostgreSQL' if args.database_url else 'SQLite'}; ready includes "
              f"migrations and startup recovery, measured from the second spawn)")
        return 0
    finally:
        env.close()


if __name__ == "__main__":
    sys.exit(main())
