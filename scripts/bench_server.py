#!/usr/bin/env python3
"""The server's footprint and start (issue 14, goal 4; BENCHMARKS.md "Server memory").

For one release binary, on SQLite and (with --pg URL, a database that exists
and is empty) on PostgreSQL:
  - resident memory (/proc/PID/smaps_rollup: Rss, of which anonymous) after
    start and one login, and after N trivial script runs over HTTP;
  - ready to serve: spawn to the first 200 from /readyz on a migrated
    database, median of 7 starts after one untimed;
  - run latency before and after 20 logins: three blocks of 30 sequential
    runs, 20 password logins, three more blocks (block medians, ms), and
    the RSS around the logins.
It reuses scripts/bench_runs.py's server, client and trivial worker.

usage: scripts/bench_server.py [--binary PATH] [--runs 100] [--pg URL]
"""
import argparse
import importlib.util
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bench_runs", HERE / "bench_runs.py")
br = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(br)


def rss(pid: int) -> tuple:
    """(Rss, Anonymous) in MiB."""
    vals = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        parts = line.split()
        if parts[0] in ("Rss:", "Anonymous:"):
            vals[parts[0]] = int(parts[1]) / 1024
    return round(vals["Rss:"], 1), round(vals["Anonymous:"], 1)


def block(client, n: int) -> float:
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        br.one_run(client, 0.002)
        t.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(t), 2)


def footprint(env, name: str, pg, runs: int) -> dict:
    srv = br.Server(env, name, env.data_dir(name), pg, 4)
    try:
        srv.wait_ready()
        time.sleep(1)
        out = {"start": rss(srv.proc.pid)}
        c = br.Client(srv.port, srv.key)
        for _ in range(runs):
            br.one_run(c, 0.01)
        time.sleep(2)
        out[f"after_{runs}_runs"] = rss(srv.proc.pid)
        before = [block(c, 30) for _ in range(3)]
        r0 = rss(srv.proc.pid)
        for _ in range(20):
            st = br._post(srv.port, "/v1/session",
                          {"username": "bench", "password": "benchmark passphrase"})[0]
            if st != 201:
                raise br.BenchError(f"login answered {st}")
        out["rss_around_20_logins"] = [r0, rss(srv.proc.pid)]
        out["run_ms_before_logins"] = before
        out["run_ms_after_logins"] = [block(c, 30) for _ in range(3)]
        return out
    finally:
        srv.close()


def ready(env, name: str, pg) -> list:
    br.api_key = lambda port, d: ""  # readiness only: no key needed
    d = env.data_dir(name)
    t = []
    for i in range(8):
        s = br.Server(env, f"{name}{i}", d, pg, 4)
        try:
            ms = s.wait_ready()
        finally:
            s.close()
        if i:
            t.append(round(ms, 1))
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", type=Path, default=br.AIRLOCK)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--pg", help="postgres://… of an existing, empty database")
    a = ap.parse_args()
    br.AIRLOCK = a.binary
    env = br.Env(False)
    try:
        dbs = [("sqlite", None)] + ([("postgres", a.pg)] if a.pg else [])
        for db, url in dbs:
            f = footprint(env, db, url, a.runs)
            print(f"{db}: RSS, anonymous MiB: after start {f['start']}, after {a.runs} runs "
                  f"{f[f'after_{a.runs}_runs']}; around 20 logins {f['rss_around_20_logins']}; "
                  f"run ms (block medians) before logins {f['run_ms_before_logins']}, "
                  f"after {f['run_ms_after_logins']}")
        # Ready: the SQLite file is migrated by the first start; a PostgreSQL
        # database was migrated by the footprint above.
        for db, url in dbs:
            t = ready(env, db + "-ready", url)
            print(f"{db}: ready ms {t}, median {statistics.median(t)}")
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
