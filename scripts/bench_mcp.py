#!/usr/bin/env python3
"""MCP overhead against the HTTP API, in one run (MCP-1, issue 17).

Starts `airlock up` (default target/release/airlock; --binary to choose) on
a fresh SQLite data dir with one trivial worker, bootstraps an owner, mints
a key, finishes one run, then measures, interleaved round-robin over one
keep-alive connection each:

- `GET /v1/runs/{id}` (the HTTP API's read of a run), and
- `POST /mcp` `tools/call get_run {"run_id": id, "wait_s": 0}` (the same
  read through the MCP front end: JSON-RPC envelope check, bearer gate,
  rmcp's stateless streamable HTTP, the tool, and its audit event).

Prints a Markdown table (median, p90, p99 in ms and the ratio of medians)
on stdout; progress on stderr. Standard library only. All traffic is on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "airlock"))
    ap.add_argument("-n", type=int, default=1000, help="samples per figure")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="airlock-bench-mcp-"))
    workers = root / "workers" / "trivial"
    workers.mkdir(parents=True)
    (workers / "worker.toml").write_text(
        '[worker]\nid = "trivial"\ntitle = "trivial"\ndescription = "bench"\n'
        'kind = "script"\nentry = "run.sh"\nruntime = "sh"\n'
    )
    (workers / "run.sh").write_text("echo ok\n")
    port = free_port()
    env = dict(os.environ, AIRLOCK_DATA_DIR=str(root / "data"), AIRLOCK_WORKERS_DIR=str(root / "workers"))
    # Rate limits out of the way: the benchmark measures the path, not the limiter.
    env.update(AIRLOCK_RATE_READS_PER_S="1000000", AIRLOCK_RATE_WRITES_PER_S="1000000",
               AIRLOCK_RATE_PER_CLIENT_PER_S="1000000")
    server = subprocess.Popen(
        [a.binary, "up", "--listen", f"127.0.0.1:{port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(300):
            try:
                if call(conn, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            time.sleep(0.05)
        token = (root / "data" / "keys" / "bootstrap.token").read_text().strip()
        pw = "correct horse battery staple"
        call(conn, "POST", "/v1/bootstrap", json.dumps({"token": token, "username": "owner", "password": pw}))
        st, cookie, body = call(conn, "POST", "/v1/session", json.dumps({"username": "owner", "password": pw}))
        csrf = json.loads(body)["csrf_token"]
        st, _, body = call(conn, "POST", "/v1/keys", json.dumps({"name": "bench"}),
                           {"Cookie": cookie.split(";")[0], "X-CSRF-Token": csrf})
        key = json.loads(body)["key"]
        auth = {"Authorization": f"Bearer {key}"}
        st, _, body = call(conn, "POST", "/v1/workers/trivial/runs", "{}", auth)
        run = json.loads(body)["run"]["id"]
        for _ in range(600):
            st, _, body = call(conn, "GET", f"/v1/runs/{run}", None, auth)
            if json.loads(body)["run"]["state"] == "succeeded":
                break
            time.sleep(0.05)
        mcp_headers = dict(auth, Accept="application/json, text/event-stream")
        rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "get_run", "arguments": {"run_id": run, "wait_s": 0}}})
        api_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mcp_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        samples = {"api": [], "mcp": []}
        for i in range(a.n + 50):
            for name in (("api", "mcp") if i % 2 == 0 else ("mcp", "api")):
                t = time.perf_counter()
                if name == "api":
                    st, _, body = call(api_conn, "GET", f"/v1/runs/{run}", None, auth)
                    ok = st == 200
                else:
                    st, _, body = call(mcp_conn, "POST", "/mcp", rpc, mcp_headers)
                    ok = st == 200 and b'"succeeded"' in body and b'"isError":true' not in body
                dt = (time.perf_counter() - t) * 1000
                if not ok:
                    print(f"{name}: unexpected answer {st}: {body[:200]!r}", file=sys.stderr)
                    return 1
                if i >= 50:  # warm-up
                    samples[name].append(dt)
        def q(xs, p):
            xs = sorted(xs)
            return xs[min(len(xs) - 1, int(p * len(xs)))]
        api_med = statistics.median(samples["api"])
        print("| path | median ms | p90 ms | p99 ms | × HTTP GET |")
        print("|---|---|---|---|---|")
        for name, label in (("api", "HTTP `GET /v1/runs/{id}`"), ("mcp", "MCP `tools/call get_run` (wait_s 0)")):
            xs = samples[name]
            med = statistics.median(xs)
            print(f"| {label} | {med:.3f} | {q(xs, 0.9):.3f} | {q(xs, 0.99):.3f} | {med / api_med:.2f} |")
        print(f"\n{a.n} samples each, interleaved; {os.cpu_count()} CPUs; binary {a.binary}", file=sys.stderr)
        return 0
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
