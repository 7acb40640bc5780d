#!/usr/bin/env python3
"""Scale-out benchmark for `airlock serve --role` (OPS-2).

Runs per second for a sleep-bound worker (`sleep 0.2`, then `{}` as the
result) with 1, 2 and 4 `serve --role worker` processes and one
`serve --role web` process on a fresh PostgreSQL database, against one
`airlock up` on SQLite, in the same invocation. Every process gets
AIRLOCK_MAX_CONCURRENT (default 4), so one process runs at most that many
sandboxes at once: adding worker processes adds capacity until the CPU (2
cores here) or the database is the limit.

Method, per configuration: RUNS runs are created through the web node by 4
client threads as fast as it accepts them; the figure is RUNS divided by the
time from the first POST to the last run seen terminal (each run polled
until terminal, in creation order). Every run must end `succeeded`.

Usage: scripts/bench_roles.py [--runs 240] [--concurrency 4]
       [--workers 1,2,4] [--airlock target/release/airlock]
Standard library only; reuses scripts/bench_runs.py's helpers (bootstrap,
HTTP client, psql). Writes bench/results_roles.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs as br  # noqa: E402

RESULTS = br.REPO / "bench" / "results_roles.json"
RUN_SH = "sleep 0.2\necho '{}' > /airlock/output/result.json\n"
LIMITS = dict(AIRLOCK_RATE_READS_PER_S=100000, AIRLOCK_RATE_WRITES_PER_S=100000,
              AIRLOCK_RATE_PER_CLIENT_PER_S=100000,
              AIRLOCK_QUOTA_RUNS_PER_USER_DAY=100000000,
              AIRLOCK_QUOTA_RUNS_PER_WORKSPACE_DAY=100000000)


class Proc:
    """One airlock process with its log; stopped with SIGTERM by close()."""

    def __init__(self, airlock: Path, env: br.Env, name: str, args: list, e: dict):
        self.name = name
        self.log_path = env.root / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(airlock), *args], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=e,
                                     cwd=env.root)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, needle: str) -> None:
        t0 = time.perf_counter()
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise br.BenchError(f"{self.name} exited: {self.text()[-400:]}")
            if time.perf_counter() - t0 > br.READY_TIMEOUT_S:
                raise br.BenchError(f"{self.name} not ready: {self.text()[-400:]}")
            time.sleep(0.02)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def measure(port: int, key: str, runs: int) -> dict:
    ids: list = [None] * runs
    errors: list = []
    nxt = iter(range(runs))
    lock = threading.Lock()
    t0 = time.perf_counter()

    def create():
        c = br.Client(port, key)
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                break
            st, raw = c.request("POST", "/v1/workers/nap/runs", {"input": {}})
            if st != 201:
                errors.append(f"{st} {raw[:200]!r}")
                break
            ids[i] = json.loads(raw)["run"]["id"]
        c.close()

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise br.BenchError(f"run creation failed: {errors[0]}")
    created_s = time.perf_counter() - t0
    c = br.Client(port, key)
    states: dict = {}
    for rid in ids:
        deadline = time.perf_counter() + 300
        while True:
            st, raw = c.request("GET", f"/v1/runs/{rid}")
            state = json.loads(raw)["run"]["state"] if st == 200 else "?"
            if state in br.TERMINAL:
                states[state] = states.get(state, 0) + 1
                break
            if time.perf_counter() > deadline:
                raise br.BenchError(f"run {rid} stuck in {state}")
            time.sleep(0.02)
    total = time.perf_counter() - t0
    c.close()
    return {"runs": runs, "seconds": round(total, 3), "runs_per_s": round(runs / total, 2),
            "create_seconds": round(created_s, 3), "states": states}


def sqlite_up(airlock: Path, env: br.Env, args) -> dict:
    data = env.data_dir("sqlite")
    port = br.free_port()
    e = env.env(data, None, AIRLOCK_MAX_CONCURRENT=args.concurrency, **LIMITS)
    p = Proc(airlock, env, "up-sqlite", ["up", "--listen", f"127.0.0.1:{port}"], e)
    try:
        p.wait_for('"event":"listening"')
        key = br.api_key(port, data)
        return measure(port, key, args.runs)
    finally:
        p.close()


def pg_roles(airlock: Path, env: br.Env, args, workers: int) -> dict:
    db = f"airlock_bench_roles_{uuid.uuid4().hex[:8]}"
    ok, out = br.psql(f"CREATE DATABASE {db}")
    if not ok:
        raise br.BenchError(out)
    url = f"postgres://{br.PG_USER}@{br.PG_HOST}:{br.PG_PORT}/{db}"
    data = env.data_dir(f"pg-{workers}")
    procs = []
    try:
        port = br.free_port()
        e = env.env(data, url, AIRLOCK_MAX_CONCURRENT=args.concurrency, **LIMITS)
        web = Proc(airlock, env, f"web-{workers}",
                   ["serve", "--role", "web", "--listen", f"127.0.0.1:{port}"], e)
        procs.append(web)
        web.wait_for('"event":"listening"')
        key = br.api_key(port, data)
        for n in range(workers):
            w = Proc(airlock, env, f"worker-{workers}-{n}", ["serve", "--role", "worker"], e)
            procs.append(w)
        for w in procs[1:]:
            w.wait_for('"event":"ready"')
        return measure(port, key, args.runs)
    finally:
        for p in procs:
            p.close()
        br.psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=240)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--airlock", type=Path, default=br.AIRLOCK)
    args = ap.parse_args()
    if not args.airlock.exists():
        print(f"{args.airlock} is missing: cargo build --release -p airlock-cli",
              file=sys.stderr)
        return 2
    why = br.pg_reachable()
    if why:
        print(why, file=sys.stderr)
        return 2
    env = br.Env(keep=False)
    nap = env.workers / "nap"
    nap.mkdir()
    (nap / "worker.toml").write_text(br.WORKER_TOML.replace('"trivial"', '"nap"'))
    (nap / "run.sh").write_text(RUN_SH)
    (nap / "run.sh").chmod(0o755)
    res: dict = {"runs": args.runs, "concurrency_per_process": args.concurrency,
                 "worker": RUN_SH, "results": {}}
    try:
        br.progress("sqlite: one airlock up")
        res["results"]["sqlite_up"] = sqlite_up(args.airlock, env, args)
        for n in [int(x) for x in args.workers.split(",")]:
            br.progress(f"postgres: 1 web + {n} worker(s)")
            res["results"][f"pg_workers_{n}"] = pg_roles(args.airlock, env, args, n)
    finally:
        env.close()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=2) + "\n")
    r = res["results"]
    print("| setup | runs | seconds | runs/s | states |")
    print("|---|---|---|---|---|")
    for name, v in r.items():
        print(f"| {name} | {v['runs']} | {v['seconds']} | {v['runs_per_s']} | {v['states']} |")
    one, two = r.get("pg_workers_1"), r.get("pg_workers_2")
    if one and two:
        print(f"\n2 workers / 1 worker: {two['runs_per_s'] / one['runs_per_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
