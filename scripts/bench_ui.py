#!/usr/bin/env python3
"""Web interface benchmarks (issue 16): how long the runs pages take with
a big history and a huge log.

Starts `airlock up` (default target/release/airlock; --binary to choose) on
a fresh SQLite data dir, bootstraps an owner and signs in (a session
cookie, as a browser holds it), then stops the server and stages rows
straight into its database (the API's daily run quota and the sandbox
would make 10,000 real runs take hours; what is measured is the read
path, which is the same whoever wrote the rows):

- `--runs` finished runs (default 10,000) of worker `trivial`, one second
  apart, plus 10 of worker `rare` spread among them (a filter that has to
  skip almost everything);
- one run whose log is `--lines` lines (default 100,000) written as one
  line per event (the worst case), and one with the same lines in chunks
  of 10 lines per event (the executor keeps at most 10,000 log events).

Then restarts the server and measures, sequentially over one keep-alive
connection, `-n` samples each (after 5 warm-up requests): time to first
byte (request sent to status line and headers read) and total time (to
the last byte of the body), and the body size, for

- `GET /runs` (the newest 50), `GET /runs?worker=rare`, `GET /runs?state=failed`,
  the second page (`cursor=`);
- `GET /runs/{id}` of both big-log runs (the page holds the last 5,000
  lines; the rest is the full-log download);
- `GET /runs/{id}/log.txt` (the full log).

Prints a Markdown table on stdout; progress on stderr. Standard library
only. All traffic is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PW = "correct horse battery staple"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(conn, method, path, body=None, headers=None):
    h = {"Host": "127.0.0.1"}
    if body is not None:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    return r.status, r.getheader("set-cookie"), data


def start(binary: str, root: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, AIRLOCK_DATA_DIR=str(root / "data"), AIRLOCK_WORKERS_DIR=str(root / "workers"))
    env.update(AIRLOCK_RATE_READS_PER_S="1000000", AIRLOCK_RATE_WRITES_PER_S="1000000",
               AIRLOCK_RATE_PER_CLIENT_PER_S="1000000")
    p = subprocess.Popen([binary, "up", "--listen", f"127.0.0.1:{port}"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            if call(conn, "GET", "/readyz")[0] == 200:
                return p
        except OSError:
            pass
        time.sleep(0.05)
    p.kill()
    raise SystemExit("the server did not become ready")


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()


def run_id() -> str:
    return "run_" + uuid.uuid4().hex


def stage(db: Path, n_runs: int, n_lines: int) -> dict:
    """Rows as the executor leaves them; returns the ids worth fetching."""
    c = sqlite3.connect(db)
    ws = c.execute("SELECT id FROM workspaces ORDER BY created_at LIMIT 1").fetchone()[0]
    actor = c.execute("SELECT id FROM users LIMIT 1").fetchone()[0]
    t0 = int(time.time() * 1000) - (n_runs + 10) * 1000
    cols = ("id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, "
            "created_at, started_at, finished_at, attempt, fencing_token, workload_started, "
            "exit_code, outputs, next_event_seq")
    rows = []
    rare_every = max(1, n_runs // 10)
    for i in range(n_runs):
        worker = "rare" if i % rare_every == rare_every // 2 else "trivial"
        state = "failed" if i % 97 == 0 else "succeeded"
        created = t0 + i * 1000
        rows.append((run_id(), ws, worker, state, "{}", hashlib.sha256(b"{}").hexdigest(), "api", actor,
                     created, created + 10, created + 250, 1, 1, 1, 0 if state == "succeeded" else 1,
                     '{"ok": true}', 1))
    big = {}
    now = int(time.time() * 1000)
    for label, per_event in (("one line per event", 1), ("10 lines per event", 10)):
        rid = run_id()
        big[label] = rid
        rows.append((rid, ws, "trivial", "succeeded", "{}", hashlib.sha256(b"{}").hexdigest(), "api", actor,
                     now - 5000, now - 4990, now - 10, 1, 1, 1, 0, '{"ok": true}', 1))
    c.executemany(f"INSERT INTO runs ({cols}) VALUES ({','.join('?' * 17)})", rows)
    for label, per_event in (("one line per event", 1), ("10 lines per event", 10)):
        rid = big[label]
        events = []
        seq = 0
        for start_line in range(0, n_lines, per_event):
            seq += 1
            text = "".join(f"line {k}: the quick brown fox jumps over the lazy dog\n"
                           for k in range(start_line, min(n_lines, start_line + per_event)))
            stream = "stderr" if seq % 50 == 0 else "stdout"
            events.append((ws, rid, seq, now - 5000 + seq, "log", json.dumps({"stream": stream, "text": text})))
        events.append((ws, rid, seq + 1, now - 10, "finish", json.dumps({"state": "succeeded", "error_code": None})))
        c.executemany("INSERT INTO run_events (workspace_id, run_id, seq, at, kind, data) VALUES (?,?,?,?,?,?)", events)
        c.execute("UPDATE runs SET next_event_seq = ? WHERE id = ?", (seq + 2, rid))
    c.commit()
    c.close()
    return big


def measure(port: int, path: str, headers: dict, n: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ttfb, total, size = [], [], 0
    for i in range(n + 5):
        t = time.perf_counter()
        conn.request("GET", path, headers=dict(headers, Host="127.0.0.1"))
        r = conn.getresponse()
        t1 = time.perf_counter()
        body = r.read()
        t2 = time.perf_counter()
        if r.status != 200:
            raise SystemExit(f"{path}: {r.status} {body[:300]!r}")
        if i >= 5:
            ttfb.append((t1 - t) * 1000)
            total.append((t2 - t) * 1000)
            size = len(body)
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]
    return {"ttfb_med": statistics.median(ttfb), "ttfb_p90": q(ttfb, 0.9),
            "total_med": statistics.median(total), "total_p90": q(total, 0.9), "bytes": size}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "airlock"))
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("-n", type=int, default=30, help="samples per figure")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="airlock-bench-ui-"))
    for w in ("trivial", "rare"):
        d = root / "workers" / w
        d.mkdir(parents=True)
        (d / "worker.toml").write_text(
            f'[worker]\nid = "{w}"\ntitle = "{w}"\ndescription = "bench"\n'
            'kind = "script"\nentry = "run.sh"\nruntime = "sh"\n')
        (d / "run.sh").write_text("echo ok\n")
    port = free_port()
    server = start(a.binary, root, port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        token = (root / "data" / "keys" / "bootstrap.token").read_text().strip()
        st, _, body = call(conn, "POST", "/v1/bootstrap",
                           json.dumps({"token": token, "username": "owner", "password": PW}))
        assert st == 201, body
    finally:
        stop(server)
    dbs = [p for p in (root / "data").rglob("*.db")]
    if len(dbs) != 1:
        raise SystemExit(f"expected one SQLite database under data/, found {dbs}")
    print(f"staging {a.runs} runs and 2 runs of {a.lines} log lines …", file=sys.stderr)
    t = time.perf_counter()
    big = stage(dbs[0], a.runs, a.lines)
    print(f"staged in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    server = start(a.binary, root, port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        st, cookie, body = call(conn, "POST", "/v1/session", json.dumps({"username": "owner", "password": PW}))
        assert st == 201, body
        headers = {"Cookie": cookie.split(";")[0]}
        st, _, body = call(conn, "GET", "/v1/runs?limit=50", None, headers)
        # The second page's cursor, from the API (the same list).
        cursor = json.loads(body)["next_cursor"] if st == 200 else ""
        cases = [
            (f"`/runs` (newest 50 of {a.runs:,})", "/runs"),
            ("`/runs` second page (cursor)", f"/runs?cursor={cursor}"),
            ("`/runs?worker=rare` (10 matches)", "/runs?worker=rare"),
            ("`/runs?state=failed`", "/runs?state=failed"),
        ]
        for label, rid in big.items():
            cases.append((f"`/runs/{{id}}`, {a.lines:,} lines, {label}", f"/runs/{rid}"))
        cases.append((f"`/runs/{{id}}/log.txt`, {a.lines:,} lines, one per event",
                      f"/runs/{big['one line per event']}/log.txt"))
        print("| page | TTFB median ms | TTFB p90 ms | total median ms | total p90 ms | body |")
        print("|---|---|---|---|---|---|")
        for label, path in cases:
            print(f"measuring {path} …", file=sys.stderr)
            m = measure(port, path, headers, a.n)
            print(f"| {label} | {m['ttfb_med']:.1f} | {m['ttfb_p90']:.1f} | {m['total_med']:.1f} | "
                  f"{m['total_p90']:.1f} | {m['bytes'] / 1024:.0f} KiB |", flush=True)
        print(f"\n{a.n} samples each after 5 warm-up; {os.cpu_count()} CPUs; binary {a.binary}", file=sys.stderr)
        return 0
    finally:
        stop(server)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
