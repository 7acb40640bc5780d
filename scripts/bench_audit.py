#!/usr/bin/env python3
"""Audit verification against plain SHA-256 over the same bytes (issue 14, goal 5).

For each chain length N (default 10^5 and 10^6 events of one workspace):

1. `verify_bench emit N` (crates/airlock-audit/examples/verify_bench.rs) writes a valid chain
   of N stored lines shaped like a server's events; they go into a fresh, migrated SQLite
   database (`audit_events`: workspace_id, seq, line, hash), as `airlock` stores them.
2. `airlock audit verify` runs on it: one untimed run (it must print `ok N events`), then
   REPS timed runs per binary, alternating binaries when several are given (`--binary`,
   e.g. a build of the commit before, to compare). Wall time from spawn to exit (through
   /usr/bin/time, which reports the peak memory, max RSS). The figure includes process start, opening the
   database and reading every row.
3. Plain SHA-256 over the same bytes, in the same run: every line hashed once, (a) as one
   buffer (hashlib over the concatenated lines: the pure throughput of SHA-256 on this CPU)
   and (b) line by line (hashlib per line, what scripts/bench_runs.py reports).
4. `verify_bench measure N`: the verifier alone, in one process, against SHA-256 of each line
   with the same Rust crate, chunk by chunk (no database, no process start).

Standard library only. Run after a release build of the CLI and the example:

    cargo build --release -p airlock-cli --bin airlock
    cargo build --release -p airlock-audit --example verify_bench
    nice -n 19 scripts/bench_audit.py [--events 100000,1000000] [--reps 3] [--binary PATH ...]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
WS = "ws_default"


def progress(msg: str) -> None:
    print(f"[bench_audit] {msg}", file=sys.stderr, flush=True)


def run_timed(argv: list, env: dict) -> tuple:
    """(wall ms, max RSS KiB, stdout, CPU ms: user + system) of one run. Peak memory comes from /usr/bin/time, whose
    child is forked from a small process: a child forked from this script would count the
    script's own pages (the lines it holds) in its high-water mark."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M %U %S"] + argv, env=env, capture_output=True)
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise SystemExit(f"{argv} exited {p.returncode}: {p.stdout.decode(errors='replace')}")
    maxrss, user, system = p.stderr.decode().strip().splitlines()[-1].split()
    return ms, int(maxrss), p.stdout.decode(), (float(user) + float(system)) * 1000


def build_db(binary: Path, data: Path, lines_path: Path, env: dict) -> tuple:
    """A migrated SQLite database holding the chain; returns (lines as bytes, KiB)."""
    # Migrates the empty database.
    run_timed([str(binary), "audit", "verify"], env)
    lines = lines_path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    con = sqlite3.connect(data / "airlock.db")
    try:
        rows = []
        for i, b in enumerate(lines):
            text = b.decode()
            at = text.index(',"hash":"') + 9
            rows.append((WS, i + 1, text, text[at:at + 64]))
        con.executemany(
            "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES (?, ?, ?, ?)", rows)
        con.commit()
    finally:
        con.close()
    return lines, sum(len(b) for b in lines) / 1024


def sha_passes(lines: list, reps: int) -> tuple:
    """Median ms of SHA-256 over the lines as one buffer, and line by line."""
    whole, per_line = [], []
    buf = b"".join(lines)
    for _ in range(reps):
        t0 = time.perf_counter()
        hashlib.sha256(buf).digest()
        whole.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        for b in lines:
            hashlib.sha256(b).digest()
        per_line.append((time.perf_counter() - t0) * 1000)
    return statistics.median(whole), statistics.median(per_line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", default="100000,1000000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--binary", action="append", type=Path,
                    help="airlock binaries to compare (default: the release build)")
    ap.add_argument("--bench", type=Path, default=TARGET / "release" / "examples" / "verify_bench")
    args = ap.parse_args()
    binaries = args.binary or [TARGET / "release" / "airlock"]
    for b in binaries + [args.bench]:
        if not b.exists():
            raise SystemExit(f"{b} is missing: build it first (see --help)")

    version_ms = statistics.median(
        run_timed([str(binaries[0]), "--version"], dict(os.environ))[0] for _ in range(10))
    load = os.getloadavg()
    results = []
    for n in (int(x) for x in args.events.split(",")):
        root = Path(tempfile.mkdtemp(prefix="airlock-bench-audit-"))
        try:
            data = root / "data"
            data.mkdir()
            (root / "workers").mkdir()
            env = dict(os.environ, AIRLOCK_DATA_DIR=str(data),
                       AIRLOCK_WORKERS_DIR=str(root / "workers"))
            env.pop("AIRLOCK_DATABASE_URL", None)
            progress(f"{n} events: emitting the chain")
            lines_path = root / "chain.jsonl"
            with open(lines_path, "wb") as f:
                subprocess.run([str(args.bench), "emit", str(n)], stdout=f, check=True)
            progress(f"{n} events: loading SQLite")
            lines, kib = build_db(binaries[0], data, lines_path, env)
            sha_whole, sha_lines = sha_passes(lines, max(args.reps, 3))
            timings = {str(b): [] for b in binaries}
            cpu = {str(b): [] for b in binaries}
            rss = {str(b): 0 for b in binaries}
            for b in binaries:
                _, _, out, _ = run_timed([str(b), "audit", "verify"], env)  # warm the page cache
                if f"{WS}: ok {n} events" not in out:
                    raise SystemExit(f"{b}: unexpected verdict {out!r}")
            for rep in range(args.reps):
                for b in (binaries if rep % 2 == 0 else list(reversed(binaries))):
                    progress(f"{n} events: {b} run {rep + 1}")
                    ms, maxrss, _, cpu_ms = run_timed([str(b), "audit", "verify"], env)
                    timings[str(b)].append(ms)
                    cpu[str(b)].append(cpu_ms)
                    rss[str(b)] = max(rss[str(b)], maxrss)
            progress(f"{n} events: verifier alone, in process")
            core = subprocess.run([str(args.bench), "measure", str(n)], check=True,
                                  capture_output=True, text=True).stdout
            results.append((n, kib, sha_whole, sha_lines, timings, rss, core, cpu))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    print("| events | MiB | SHA-256 one buffer ms | SHA-256 per line ms | binary | "
          "`audit verify` median ms | events/s | ratio to SHA-256 (one buffer) | "
          "throughput vs SHA-256 | ratio to SHA-256 per line | CPU ms (user + sys) | "
          "CPU time vs SHA-256 (one buffer) | max RSS MiB |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, kib, sha_whole, sha_lines, timings, rss, _, cpu in results:
        for b, samples in timings.items():
            med = statistics.median(samples)
            cpu_med = statistics.median(cpu[b])
            print(f"| {n} | {kib / 1024:.0f} | {sha_whole:.1f} | {sha_lines:.1f} | "
                  f"{Path(b).parent.name}/{Path(b).name} | {med:.1f} | {n / (med / 1000):.0f} | "
                  f"{med / sha_whole:.2f} | {100 * sha_whole / med:.0f}% | "
                  f"{med / sha_lines:.2f} | {cpu_med:.0f} | {cpu_med / sha_whole:.2f} | "
                  f"{rss[b] / 1024:.1f} |")
    print()
    print(f"Process start (`--version`): median {version_ms:.1f} ms. Load average at the start: "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; at the end: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()) + ".")
    print()
    print("Verifier alone, in process (`verify_bench measure`, Rust sha2 per line):")
    print()
    for n, _, _, _, _, _, core, _ in results:
        print("```")
        print(core.strip())
        print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
