#!/usr/bin/env python3
"""Run-orchestration benchmarks for airlock.

What it measures, in one go, against `target/release/airlock`:

1. Process figures (interleaved round-robin, like scripts/bench):
   - `airlock --version`: process start cost, for context;
   - the baseline: `airlock sandbox exec -- /bin/sh -c 'echo {} > /dev/null'`;
   - `airlock run trivial --json` on a fresh SQLite data dir (the whole
     pipeline in-process: create, claim, sandbox, collect, finish).
2. HTTP figures, against `airlock up` on SQLite and then on PostgreSQL
   (a fresh database, dropped afterwards):
   - latency: N sequential runs, each `POST /v1/workers/trivial/runs` then
     `GET /v1/runs/{id}` every POLL ms until the state is terminal; the
     figure is POST-sent to terminal-GET-received;
   - throughput: 1, 4 and 16 client threads each doing create -> poll in a
     loop for DURATION seconds (no new run is started after the deadline;
     runs in flight are finished and counted), with AIRLOCK_MAX_CONCURRENT.
3. Audit: `airlock audit verify` on the SQLite server's data dir (all the
   HTTP runs' events) against plain hashlib.sha256 over the same lines.

`trivial` is a script worker (`runtime = "sh"`) whose run.sh writes `{}` to
/airlock/output/result.json. Every run must end `succeeded`; any other
outcome is counted and shown as "failed".

Prints Markdown tables on stdout (progress on stderr) and writes all figures,
with raw samples, to bench/results_runs.json. Standard library only;
Python 3.9+. All traffic is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import http.client
import json
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
AIRLOCK = REPO / "target" / "release" / "airlock"
RESULTS = REPO / "bench" / "results_runs.json"

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"

RUN_TIMEOUT_S = 60.0  # one subprocess, or one run from create to terminal
READY_TIMEOUT_S = 30.0
TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "blocked", "unknown"}

WORKER_TOML = """\
[worker]
id = "trivial"
title = "trivial"
description = "benchmark worker"
kind = "script"
entry = "run.sh"
runtime = "sh"
[limits]
concurrency = 64
"""
RUN_SH = "echo '{}' > /airlock/output/result.json\n"


class BenchError(Exception):
    """A step that must succeed did not; the message says which and why."""


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def p95(samples: list) -> float:
    """Nearest-rank 95th percentile."""
    s = sorted(samples)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]


def summary(samples: list) -> dict:
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "median_ms": round(statistics.median(samples), 4),
        "p95_ms": round(p95(samples), 4),
        "min_ms": round(min(samples), 4),
        "max_ms": round(max(samples), 4),
        "mean_ms": round(statistics.fmean(samples), 4),
    }


def capture(argv: list) -> Optional[str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------
# Subprocess timing (same method as scripts/bench)


class _RunTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _RunTimeout()


def time_once(argv: list, env: dict, cwd: Path) -> tuple:
    """Run argv once, stdio on /dev/null; return (wall ms, returncode).

    Blocking waitpid() in the parent with a SIGALRM watchdog
    (subprocess.run(timeout=) polls with growing sleeps, which would round
    figures up). Main thread only.
    """
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    try:
        signal.setitimer(signal.ITIMER_REAL, RUN_TIMEOUT_S)
        rc = p.wait()
    except _RunTimeout:
        p.kill()
        p.wait()
        raise BenchError(f"{' '.join(argv[:4])} ... hung for {RUN_TIMEOUT_S:.0f} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    t1 = time.perf_counter_ns()
    return (t1 - t0) / 1e6, rc


def run_checked(argv: list, env: dict, cwd: Path, what: str) -> str:
    """Run argv, require exit 0, return stdout."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                           timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: timed out after {RUN_TIMEOUT_S:.0f} s") from None
    except OSError as e:
        raise BenchError(f"{what}: cannot start: {e}") from None
    if p.returncode != 0:
        raise BenchError(f"{what}: exit code {p.returncode}: "
                         f"{last_line(p.stderr) or last_line(p.stdout)}")
    return p.stdout


# --------------------------------------------------------------------------
# Environment


class Env:
    """Temp dirs, the trivial worker bundle and a clean environment."""

    def __init__(self, keep: bool):
        self.keep = keep
        self.root = Path(tempfile.mkdtemp(prefix="airlock-bench-runs-"))
        self.workers = self.root / "workers"
        b = self.workers / "trivial"
        b.mkdir(parents=True)
        (b / "worker.toml").write_text(WORKER_TOML)
        (b / "run.sh").write_text(RUN_SH)
        (b / "run.sh").chmod(0o755)
        # No inherited AIRLOCK_* or PG* variable may change what is measured.
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("AIRLOCK_") and not k.startswith("PG")}
        self.base_env = base

    def env(self, data_dir: Path, database_url: Optional[str] = None, **extra) -> dict:
        e = dict(self.base_env)
        e["AIRLOCK_DATA_DIR"] = str(data_dir)
        e["AIRLOCK_WORKERS_DIR"] = str(self.workers)
        if database_url:
            e["AIRLOCK_DATABASE_URL"] = database_url
        e.update({k: str(v) for k, v in extra.items()})
        return e

    def data_dir(self, name: str) -> Path:
        d = self.root / name
        d.mkdir()
        return d

    def close(self) -> None:
        if self.keep:
            progress(f"kept temp dir {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------
# 1. Process figures


def process_group(env: Env, runs: int, warmup: int) -> dict:
    progress("group: process (--version, sandbox exec baseline, airlock run)")
    sb_dir = env.data_dir("sandbox-data")
    cli_dir = env.data_dir("cli-data")
    cases = [
        ("version", "`airlock --version` (process start)",
         [str(AIRLOCK), "--version"], env.env(sb_dir)),
        ("baseline", "baseline: `airlock sandbox exec -- /bin/sh -c 'echo {} > /dev/null'`",
         [str(AIRLOCK), "sandbox", "exec", "--", "/bin/sh", "-c", "echo {} > /dev/null"],
         env.env(sb_dir)),
        ("cli_run", "`airlock run trivial --json` (SQLite)",
         [str(AIRLOCK), "run", "trivial", "--json"], env.env(cli_dir)),
    ]
    # Correctness first: each must exit 0; the run must say "succeeded".
    for key, _, argv, e in cases:
        out = run_checked(argv, e, env.root, f"check {key}")
        if key == "cli_run":
            try:
                state = json.loads(out)["run"]["state"]
            except (ValueError, KeyError, TypeError):
                raise BenchError(f"airlock run --json printed no run state: {out[:200]!r}") from None
            if state != "succeeded":
                raise BenchError(f"airlock run trivial ended {state!r}, not succeeded: {out[:300]}")
    signal.signal(signal.SIGALRM, _on_alarm)
    for key, _, argv, e in cases:
        for _ in range(warmup):
            _, rc = time_once(argv, e, env.root)
            if rc != 0:
                raise BenchError(f"{key}: warm-up run exited with {rc}")
    samples = {key: [] for key, *_ in cases}
    gc.disable()
    try:
        for r in range(runs):
            k = r % len(cases)
            for key, _, argv, e in cases[k:] + cases[:k]:
                ms, rc = time_once(argv, e, env.root)
                if rc != 0:
                    # `airlock run` exits 1 when the run ended in any state but succeeded.
                    raise BenchError(f"{key}: timed run {r + 1} exited with {rc}")
                samples[key].append(ms)
    finally:
        gc.enable()
    return {key: {"label": label, "argv": argv, **summary(samples[key]),
                  "samples_ms": [round(x, 3) for x in samples[key]]}
            for key, label, argv, _ in cases}


# --------------------------------------------------------------------------
# 2. HTTP


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> Optional[float]:
    """utime + stime of pid and its reaped children (the sandboxes)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tck = os.sysconf("SC_CLK_TCK")
    # fields[0] is state (field 3); utime..cstime are fields 14..17.
    return sum(int(x) for x in fields[11:15]) / tck


class Server:
    """`airlock up` on a free loopback port; always stopped by close()."""

    def __init__(self, env: Env, name: str, data_dir: Path, database_url: Optional[str],
                 max_concurrent: int):
        self.name = name
        self.port = free_port()
        self.log_path = env.root / f"up-{name}.log"
        self.log = open(self.log_path, "wb")
        # The benchmark measures the run pipeline, not the rate limiter.
        e = env.env(data_dir, database_url, AIRLOCK_MAX_CONCURRENT=max_concurrent,
                    AIRLOCK_RATE_READS_PER_S=100000, AIRLOCK_RATE_WRITES_PER_S=100000,
                    AIRLOCK_RATE_PER_CLIENT_PER_S=100000,
                    AIRLOCK_QUOTA_RUNS_PER_USER_DAY=100000000,
                    AIRLOCK_QUOTA_RUNS_PER_WORKSPACE_DAY=100000000)
        self.data_dir = data_dir
        self.key = None
        self.proc = subprocess.Popen(
            [str(AIRLOCK), "up", "--listen", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env=e, cwd=env.root)

    def log_tail(self, n: int = 5) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(ln.strip() for ln in lines[-n:] if ln.strip())

    def check_alive(self) -> None:
        rc = self.proc.poll()
        if rc is not None:
            raise BenchError(f"airlock up ({self.name}) exited with {rc}: {self.log_tail()}")

    def wait_ready(self) -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < READY_TIMEOUT_S:
            self.check_alive()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/readyz")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    ready_ms = (time.perf_counter() - t0) * 1000
                    self.key = api_key(self.port, self.data_dir)
                    return ready_ms
            except OSError:
                pass
            time.sleep(0.02)
        raise BenchError(f"airlock up ({self.name}) not ready after {READY_TIMEOUT_S:.0f} s: "
                         f"{self.log_tail()}")

    def cpu_seconds(self) -> Optional[float]:
        return proc_cpu_seconds(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                progress(f"airlock up ({self.name}) ignored SIGTERM for 15 s; killing it")
                self.proc.kill()
                self.proc.wait()
        self.log.close()


_KEYS: dict = {}


def _post(port: int, path: str, body: dict, headers: Optional[dict] = None) -> tuple:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"content-type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    raw = r.read()
    cookie = r.getheader("set-cookie") or ""
    c.close()
    return r.status, raw, cookie


def api_key(port: int, data_dir: Path) -> str:
    """An owner API key for this data directory: bootstrap once, log in,
    mint a key (the steps a new operator follows)."""
    if str(data_dir) in _KEYS:
        return _KEYS[str(data_dir)]
    token_file = data_dir / "keys" / "bootstrap.token"
    password = "benchmark passphrase"
    if token_file.exists():
        st, raw, _ = _post(port, "/v1/bootstrap", {"token": token_file.read_text().strip(),
                                                   "username": "bench", "password": password})
        if st != 201:
            raise BenchError(f"bootstrap failed: {st} {raw[:200]!r}")
    st, raw, cookie = _post(port, "/v1/session", {"username": "bench", "password": password})
    if st != 201:
        raise BenchError(f"login failed: {st} {raw[:200]!r}")
    csrf = json.loads(raw)["csrf_token"]
    st, raw, _ = _post(port, "/v1/keys", {"name": "bench"},
                       {"cookie": cookie.split(";")[0], "x-csrf-token": csrf})
    if st != 201:
        raise BenchError(f"key creation failed: {st} {raw[:200]!r}")
    _KEYS[str(data_dir)] = json.loads(raw)["key"]
    return _KEYS[str(data_dir)]


class Client:
    """One keep-alive HTTP connection with an API key; reconnects once on a
    broken socket."""

    def __init__(self, port: int, key: Optional[str] = None):
        self.port = port
        self.key = key
        self.conn = None

    def request(self, method: str, path: str, body: Optional[dict] = None) -> tuple:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if data is not None else {}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, raw
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                # A keep-alive connection the server closed; retry once (a POST
                # that the server never answered is safe to resend here only
                # because it was not received: RemoteDisconnected on reuse).
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def one_run(client: Client, poll_s: float) -> tuple:
    """Create a run and poll until terminal; return (ms, state, run id)."""
    t0 = time.perf_counter()
    status, raw = client.request("POST", "/v1/workers/trivial/runs", {"input": {}})
    if status != 201:
        raise BenchError(f"POST /v1/workers/trivial/runs: HTTP {status}: {raw[:200]!r}")
    run_id = json.loads(raw)["run"]["id"]
    while True:
        status, raw = client.request("GET", f"/v1/runs/{run_id}")
        if status != 200:
            raise BenchError(f"GET /v1/runs/{run_id}: HTTP {status}: {raw[:200]!r}")
        state = json.loads(raw)["run"]["state"]
        if state in TERMINAL:
            return (time.perf_counter() - t0) * 1000, state, run_id
        if time.perf_counter() - t0 > RUN_TIMEOUT_S:
            raise BenchError(f"run {run_id} still {state!r} after {RUN_TIMEOUT_S:.0f} s")
        time.sleep(poll_s)


def http_latency(srv: Server, runs: int, warmup: int, poll_s: float) -> dict:
    c = Client(srv.port, srv.key)
    try:
        for _ in range(warmup):
            _, state, rid = one_run(c, poll_s)
            if state != "succeeded":
                raise BenchError(f"warm-up run {rid} ended {state!r}")
        samples, bad = [], {}
        for _ in range(runs):
            ms, state, rid = one_run(c, poll_s)
            if state == "succeeded":
                samples.append(ms)
            else:
                bad[state] = bad.get(state, 0) + 1
    finally:
        c.close()
    srv.check_alive()
    if not samples:
        raise BenchError(f"HTTP latency ({srv.name}): no run succeeded: {bad}")
    return {**summary(samples), "not_succeeded": bad,
            "samples_ms": [round(x, 3) for x in samples]}


def auth_overhead(srv: Server, n: int = 300, logins: int = 20) -> dict:
    """What identity costs per request: an unauthenticated GET /healthz
    (baseline), an API-key GET of one run page (key hash lookup, membership
    read, bucket), and a password login (Argon2id m=19 MiB, t=2)."""
    import statistics
    plain, keyed = Client(srv.port), Client(srv.port, srv.key)
    a, b = [], []
    try:
        for i in range(n + 20):
            t = time.perf_counter()
            plain.request("GET", "/healthz")
            d1 = time.perf_counter() - t
            t = time.perf_counter()
            st, _ = keyed.request("GET", "/v1/runs?limit=1")
            d2 = time.perf_counter() - t
            if st != 200:
                raise BenchError(f"GET /v1/runs with a key answered {st}")
            if i >= 20:
                a.append(d1 * 1000)
                b.append(d2 * 1000)
    finally:
        plain.close()
        keyed.close()
    lg = []
    for _ in range(logins):
        t = time.perf_counter()
        st, raw, _ = _post(srv.port, "/v1/session",
                           {"username": "bench", "password": "benchmark passphrase"})
        lg.append((time.perf_counter() - t) * 1000)
        if st != 201:
            raise BenchError(f"login answered {st}")
    h, k = statistics.median(a), statistics.median(b)
    return {"healthz_median_ms": round(h, 3), "key_get_median_ms": round(k, 3),
            "key_get_vs_healthz": round(k / h, 2) if h > 0 else None,
            "login_median_ms": round(statistics.median(lg), 2), "n": n, "logins": logins}


def http_throughput(srv: Server, clients: int, duration: float, poll_s: float) -> dict:
    lat, states, errors = [], {}, []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def worker():
        c = Client(srv.port, srv.key)
        try:
            start.wait()
            while time.perf_counter() < deadline[0]:
                ms, state, _ = one_run(c, poll_s)
                with lock:
                    states[state] = states.get(state, 0) + 1
                    if state == "succeeded":
                        lat.append(ms)
        except Exception as e:  # noqa: BLE001 - reported, not swallowed
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
        finally:
            c.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    cpu_srv0, cpu_cli0, load0 = srv.cpu_seconds(), time.process_time(), os.getloadavg()
    t0 = time.perf_counter()
    deadline[0] = t0 + duration
    start.wait()
    for t in threads:
        t.join(duration + RUN_TIMEOUT_S + 30)
    elapsed = time.perf_counter() - t0
    cpu_srv1, cpu_cli1 = srv.cpu_seconds(), time.process_time()
    if any(t.is_alive() for t in threads):
        errors.append("a client thread did not finish")
    srv.check_alive()
    ok = states.get("succeeded", 0)
    rec = {
        "clients": clients,
        "duration_s": round(elapsed, 3),
        "succeeded": ok,
        "not_succeeded": {k: v for k, v in states.items() if k != "succeeded"},
        "client_errors": errors,
        "runs_per_s": round(ok / elapsed, 3) if elapsed > 0 else None,
        **summary(lat),
        "server_cpu_pct": (round(100 * (cpu_srv1 - cpu_srv0) / elapsed, 1)
                           if cpu_srv0 is not None and cpu_srv1 is not None else None),
        "client_cpu_pct": round(100 * (cpu_cli1 - cpu_cli0) / elapsed, 1),
        "loadavg_start": list(load0),
        "loadavg_end": list(os.getloadavg()),
        "samples_ms": [round(x, 3) for x in lat],
    }
    return rec


def http_group(env: Env, name: str, data_dir: Path, database_url: Optional[str], args) -> dict:
    progress(f"group: HTTP on {name}")
    srv = Server(env, name, data_dir, database_url, args.max_concurrent)
    try:
        ready_ms = srv.wait_ready()
        progress(f"  airlock up ready in {ready_ms:.0f} ms (port {srv.port})")
        poll_s = args.poll_ms / 1000
        lat = http_latency(srv, args.runs, args.warmup, poll_s)
        progress(f"  latency: median {lat['median_ms']:.1f} ms over {lat['n']} runs")
        tp = []
        for c in args.clients:
            rec = http_throughput(srv, c, args.duration, poll_s)
            progress(f"  {c} clients: {rec['runs_per_s']} runs/s, "
                     f"median {rec.get('median_ms', float('nan')):.1f} ms"
                     + (f", errors: {rec['client_errors'][:2]}" if rec["client_errors"] else ""))
            tp.append(rec)
        # Last: twenty Argon2id logins leave the server slower for a few
        # seconds (see BENCHMARKS.md), which must not colour the rows above.
        auth = auth_overhead(srv)
        progress(f"  auth: /healthz {auth['healthz_median_ms']:.2f} ms, "
                 f"API-key GET {auth['key_get_median_ms']:.2f} ms, "
                 f"login {auth['login_median_ms']:.1f} ms")
        return {"database": name, "ready_ms": round(ready_ms, 1), "auth": auth,
                "latency": lat, "throughput": tp}
    finally:
        srv.close()


# --------------------------------------------------------------------------
# PostgreSQL


def psql(sql: str, db: str = "postgres", tuples: bool = False) -> tuple:
    """Run one statement with psql; return (ok, stdout or error line)."""
    if shutil.which("psql") is None:
        return False, "psql not found on PATH"
    argv = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", PG_HOST, "-p", str(PG_PORT),
            "-U", PG_USER, "-d", db]
    if tuples:
        argv += ["-A", "-t"]
    argv += ["-c", sql]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGCONNECT_TIMEOUT"] = "5"
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "psql timed out"
    except OSError as e:
        return False, f"psql: {e}"
    if p.returncode != 0:
        return False, last_line(p.stderr) or f"psql exit code {p.returncode}"
    return True, p.stdout


def pg_reachable() -> Optional[str]:
    """None when PostgreSQL answers on 127.0.0.1:5432, else why not."""
    try:
        socket.create_connection((PG_HOST, PG_PORT), timeout=3).close()
    except OSError as e:
        return f"no PostgreSQL on {PG_HOST}:{PG_PORT}: {e}"
    ok, out = psql("SELECT 1")
    return None if ok else out


# --------------------------------------------------------------------------
# 3. Audit


def audit_group(env: Env, name: str, data_dir: Path, database_url: Optional[str],
                lines: list, reps: int, version_ms: Optional[float]) -> dict:
    progress(f"group: audit verify on {name}")
    e = env.env(data_dir, database_url)
    argv = [str(AIRLOCK), "audit", "verify"]
    out = run_checked(argv, e, env.root, f"airlock audit verify ({name})")
    events = 0
    for ln in out.splitlines():
        parts = ln.split()
        # "ws_default: ok N events head=..."
        if len(parts) >= 4 and parts[1] == "ok" and parts[3] == "events":
            events += int(parts[2])
        elif ln.strip():
            raise BenchError(f"airlock audit verify ({name}): unexpected line {ln!r}")
    if events == 0:
        raise BenchError(f"airlock audit verify ({name}) reported no events: {out!r}")
    if events != len(lines):
        raise BenchError(f"audit verify counted {events} events, the table has {len(lines)}")
    signal.signal(signal.SIGALRM, _on_alarm)
    samples = []
    time_once(argv, e, env.root)  # warm the page cache
    for _ in range(reps):
        ms, rc = time_once(argv, e, env.root)
        if rc != 0:
            raise BenchError(f"airlock audit verify ({name}) exited with {rc}")
        samples.append(ms)
    # Plain SHA-256 over the same bytes: one pass = every line hashed once.
    nbytes = sum(len(b) for b in lines)
    passes = []
    gc.disable()
    try:
        for _ in range(10):
            t0 = time.perf_counter_ns()
            for b in lines:
                hashlib.sha256(b).digest()
            passes.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        gc.enable()
    v_med = statistics.median(samples)
    sha_med = statistics.median(passes)
    rec = {
        "database": name,
        "events": events,
        "bytes": nbytes,
        "verify": {**summary(samples), "samples_ms": [round(x, 3) for x in samples]},
        "verify_events_per_s": round(events / (v_med / 1000), 1),
        "sha256_pass_ms": {**summary(passes), "samples_ms": [round(x, 4) for x in passes]},
        "sha256_events_per_s": round(events / (sha_med / 1000), 1) if sha_med > 0 else None,
        "ratio_verify_to_sha256": round(v_med / sha_med, 1) if sha_med > 0 else None,
        "process_start_ms": version_ms,
    }
    if version_ms is not None:
        net = v_med - version_ms
        rec["verify_minus_start_ms"] = round(net, 3)
        rec["ratio_net_to_sha256"] = round(net / sha_med, 1) if sha_med > 0 else None
    return rec


def sqlite_lines(db: Path) -> tuple:
    t0 = time.perf_counter()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        lines = [r[0].encode() for r in
                 con.execute("SELECT line FROM audit_events ORDER BY workspace_id, seq")]
    finally:
        con.close()
    return lines, (time.perf_counter() - t0) * 1000


def pg_lines(dbname: str) -> tuple:
    t0 = time.perf_counter()
    ok, out = psql("SELECT line FROM audit_events ORDER BY workspace_id, seq", db=dbname,
                   tuples=True)
    if not ok:
        raise BenchError(f"reading audit_events from PostgreSQL: {out}")
    # Lines are single-line JSON; psql -A -t prints one per line.
    lines = [ln.encode() for ln in out.split("\n") if ln]
    return lines, (time.perf_counter() - t0) * 1000


# --------------------------------------------------------------------------
# Output


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def fmt(x, nd=1) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def print_tables(res: dict) -> None:
    proc = res.get("process")
    base = proc["baseline"]["median_ms"] if proc else None

    print("### Run latency (trivial script worker)")
    print()
    print("| case | n | median ms | p95 ms | ratio to baseline |")
    print("|---|---:|---:|---:|---:|")
    if proc:
        for key in ("version", "baseline", "cli_run"):
            r = proc[key]
            print(f"| {r['label']} | {r['n']} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | "
                  f"{r['median_ms'] / base:.2f} |")
    for g in res["http"]:
        if "error" in g:
            print(f"| HTTP create→terminal ({g['database']}) | | {cell(g['error'])} | | |")
            continue
        r = g["latency"]
        ratio = fmt(r["median_ms"] / base, 2) if base else "n/a"
        extra = f" ({sum(r['not_succeeded'].values())} not succeeded)" if r["not_succeeded"] else ""
        print(f"| HTTP create→terminal ({g['database']}, poll {res['params']['poll_ms']} ms)"
              f"{extra} | {r['n']} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {ratio} |")
    print()

    print(f"### Run throughput over HTTP (AIRLOCK_MAX_CONCURRENT="
          f"{res['params']['max_concurrent']}, {res['params']['duration_s']:.0f} s per row, "
          f"{res['machine']['cpus']} CPUs)")
    print()
    print("| database | clients | runs | runs/s | median ms | p95 ms | not succeeded | "
          "server CPU % | client CPU % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for g in res["http"]:
        if "error" in g:
            print(f"| {g['database']} | | | {cell(g['error'])} | | | | | |")
            continue
        for t in g["throughput"]:
            bad = sum(t["not_succeeded"].values()) + len(t["client_errors"])
            print(f"| {g['database']} | {t['clients']} | {t['succeeded']} | "
                  f"{fmt(t['runs_per_s'])} | {fmt(t.get('median_ms'))} | {fmt(t.get('p95_ms'))} | "
                  f"{bad} | {fmt(t['server_cpu_pct'], 0)} | {fmt(t['client_cpu_pct'], 0)} |")
    print()

    print("### Audit chain verification")
    print()
    print("| database | events | KiB | `audit verify` median ms | events/s | "
          "SHA-256 pass ms | SHA-256 events/s | ratio | ratio minus start |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for a in res["audit"]:
        if "error" in a:
            print(f"| {a['database']} | | | {cell(a['error'])} | | | | | |")
            continue
        print(f"| {a['database']} | {a['events']} | {a['bytes'] / 1024:.0f} | "
              f"{a['verify']['median_ms']:.1f} | {a['verify_events_per_s']:.0f} | "
              f"{a['sha256_pass_ms']['median_ms']:.2f} | {fmt(a['sha256_events_per_s'], 0)} | "
              f"{fmt(a['ratio_verify_to_sha256'], 0)} | {fmt(a.get('ratio_net_to_sha256'), 0)} |")
    print()
    if proc:
        print(f"Process start (`airlock --version`): median {proc['version']['median_ms']:.1f} ms. "
              "\"ratio minus start\" subtracts it from the verify time; verify still includes "
              "opening the database and reading every row.")
        print()
    sys.stdout.flush()


# --------------------------------------------------------------------------


def step(res: dict, section: str, database: str, fn) -> bool:
    """Run one database's group; on BenchError record an error row and go on."""
    try:
        res[section].append(fn())
        return True
    except BenchError as e:
        progress(f"error ({section}, {database}): {e}")
        res[section].append({"database": database, "error": f"failed: {e}"})
        res["errors"].append(f"{section} {database}: {e}")
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30, help="timed runs per latency case (30)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs per case (3)")
    ap.add_argument("--duration", type=float, default=15.0,
                    help="seconds per throughput row (15)")
    ap.add_argument("--clients", default="1,4,16", help="client threads per row (1,4,16)")
    ap.add_argument("--poll-ms", type=float, default=5.0, help="GET poll interval (5)")
    ap.add_argument("--max-concurrent", type=int, default=4,
                    help="AIRLOCK_MAX_CONCURRENT for airlock up (4)")
    ap.add_argument("--verify-reps", type=int, default=10, help="timed `audit verify` runs (10)")
    ap.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL rows")
    ap.add_argument("--output", type=Path, default=RESULTS)
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (logs, data)")
    ap.add_argument("--binary", type=Path, default=None,
                    help="the airlock binary to measure (default target/release/airlock); "
                         "for a before/after comparison, run the script once per binary, "
                         "alternating")
    args = ap.parse_args()
    global AIRLOCK
    if args.binary is not None:
        AIRLOCK = args.binary.resolve()
    try:
        args.clients = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        ap.error("--clients: a comma-separated list of integers")
    if args.runs < 1 or args.duration <= 0 or not args.clients or min(args.clients) < 1:
        ap.error("--runs, --duration and --clients must be positive")

    # SIGTERM/SIGHUP -> SystemExit, so that the finally blocks stop the servers.
    def _exit(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGHUP, _exit)

    if not AIRLOCK.exists() and args.binary is not None:
        progress(f"error: {AIRLOCK} does not exist")
        return 1
    if not AIRLOCK.exists():
        progress(f"{AIRLOCK} missing; running cargo build --release -p airlock-cli")
        p = subprocess.run(["cargo", "build", "--release", "-p", "airlock-cli"], cwd=REPO)
        if p.returncode != 0 or not AIRLOCK.exists():
            progress("error: cargo build failed")
            return 1

    t_start = time.perf_counter()
    res = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count(),
                    "python": platform.python_version()},
        "git": capture(["git", "describe", "--always", "--dirty"]),
        "airlock_version": capture([str(AIRLOCK), "--version"]),
        "params": {"runs": args.runs, "warmup": args.warmup, "duration_s": args.duration,
                   "clients": args.clients, "poll_ms": args.poll_ms,
                   "max_concurrent": args.max_concurrent, "verify_reps": args.verify_reps},
        "loadavg_start": list(os.getloadavg()),
        "process": None,
        "http": [],
        "audit": [],
        "errors": [],
    }
    env = Env(args.keep_tmp)
    pg_db = None
    rc = 0
    try:
        run_checked([str(AIRLOCK), "worker", "validate", str(env.workers / "trivial")],
                    env.env(env.root), env.root, "airlock worker validate trivial")

        res["process"] = process_group(env, args.runs, args.warmup)
        version_ms = res["process"]["version"]["median_ms"]

        # SQLite: HTTP, then audit on the same data dir (server stopped).
        sq_dir = env.data_dir("http-sqlite")
        if step(res, "http", "SQLite", lambda: http_group(env, "SQLite", sq_dir, None, args)):
            def sqlite_audit():
                lines, read_ms = sqlite_lines(sq_dir / "airlock.db")
                a = audit_group(env, "SQLite", sq_dir, None, lines, args.verify_reps, version_ms)
                a["python_read_ms"] = round(read_ms, 2)
                return a
            step(res, "audit", "SQLite", sqlite_audit)

        # PostgreSQL: a fresh database, dropped afterwards.
        if args.no_postgres:
            why = "skipped (--no-postgres)"
        else:
            why = pg_reachable()
        if why is None:
            pg_db = f"airlock_bench_runs_{uuid.uuid4().hex[:12]}"
            ok, out = psql(f'CREATE DATABASE "{pg_db}"')
            if not ok:
                why = f"CREATE DATABASE failed: {out}"
                pg_db = None
        if why is not None:
            progress(f"PostgreSQL: {why}")
            res["http"].append({"database": "PostgreSQL", "error": f"PostgreSQL {why}"})
            res["audit"].append({"database": "PostgreSQL", "error": f"PostgreSQL {why}"})
        else:
            url = f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{pg_db}"
            pg_dir = env.data_dir("http-postgres")
            if step(res, "http", "PostgreSQL",
                    lambda: http_group(env, "PostgreSQL", pg_dir, url, args)):
                def pg_audit():
                    lines, read_ms = pg_lines(pg_db)
                    a = audit_group(env, "PostgreSQL", pg_dir, url, lines, args.verify_reps,
                                    version_ms)
                    a["python_read_ms"] = round(read_ms, 2)
                    a["note"] = "lines read with psql; SHA-256 pass over the same bytes"
                    return a
                step(res, "audit", "PostgreSQL", pg_audit)
        if res["errors"]:
            rc = 1
    except BenchError as e:
        progress(f"error: {e}")
        res["errors"].append(str(e))
        rc = 1
    except KeyboardInterrupt:
        progress("interrupted")
        res["errors"].append("interrupted")
        rc = 130
    finally:
        if pg_db is not None:
            ok, out = psql(f'DROP DATABASE IF EXISTS "{pg_db}" WITH (FORCE)')
            if not ok:  # PostgreSQL < 13 has no FORCE
                ok, out = psql(f'DROP DATABASE IF EXISTS "{pg_db}"')
            if not ok:
                progress(f"warning: could not drop database {pg_db}: {out}")
        env.close()

    res["loadavg_end"] = list(os.getloadavg())
    res["total_s"] = round(time.perf_counter() - t_start, 1)
    if res["process"] is not None:
        print_tables(res)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(res, indent=2) + "\n")
    progress(f"wrote {args.output} ({res['total_s']} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
