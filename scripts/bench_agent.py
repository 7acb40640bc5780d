#!/usr/bin/env python3
"""Agent harness benchmark for airlock: what one tool call costs.

Against `target/release/airlock` under `airlock up` (SQLite, fresh data
directory), with a scripted model server in this script that speaks the
OpenAI Chat Completions wire format (non-streaming) on 127.0.0.1 and answers
at once:

- an agent run whose model asks for `run_command ["/bin/true"]` N times and
  then calls `finish` (N = --calls, 10 by default), and the same run with
  N = 0 (the model finishes at once): create -> terminal over HTTP, polled;
- in the same rounds, interleaved, the bare baseline
  `airlock sandbox exec -- /bin/true`, and the same launch with what the
  harness asks for (the worker's default limits, the bundle read-only at
  /airlock/worker, a work folder writable at /airlock/work).

The harness's cost per tool call is (median(N calls) - median(0 calls)) / N:
the model round trip on loopback, the journal (proposed, decided,
dispatched, completed), the policy and the standing-rule check, the
sandbox launch through the launch seam, artifacts of the output, and the
transcript item. Its ratio to the bare launch is the figure issue 13 asks
for.

The worker's autonomy is `ask-writes`, so the first command of the first
(untimed) run waits for a person; the script approves it through the local
CLI with a standing `argv_prefix ["/bin/true"]` grant, as an operator
would, so that later commands are covered by that rule and no run waits.

Prints a Markdown table (progress on stderr) and writes the figures, with
raw samples, to bench/results_agent.json. Standard library only; all
traffic is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import http.server
import json
import os
import platform
import re
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs as br  # noqa: E402  (the shared helpers: Env, Server, Client, timing)

RESULTS = br.REPO / "bench" / "results_agent.json"
COMMAND = ["/bin/true"]

AGENT_TOML = """\
[worker]
id = "agent"
title = "benchmark agent"
kind = "agent"
entry = "AGENT.md"

[agent]
model = "bench"
tools = ["run_command", "finish"]
autonomy = "ask-writes"

[agent.budgets]
steps = 1000
tool_calls = 1000

[inputs.calls]
type = "number"

[limits]
concurrency = 8
"""


class ScriptedModel(http.server.ThreadingHTTPServer):
    """OpenAI Chat Completions, non-streaming: asks for COMMAND until the
    request holds `calls` tool results, then calls `finish`. `calls` is
    read from the run's input, which the harness puts in the first user
    message."""

    daemon_threads = True
    requests = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(n))
        self.server.requests += 1
        msgs = body.get("messages", [])
        want = 0
        for m in msgs:
            if m.get("role") == "user":
                text = m.get("content")
                if not isinstance(text, str):
                    text = json.dumps(text)
                found = re.search(r'"calls"\s*:\s*(\d+)', text)
                if found:
                    want = int(found.group(1))
                    break
        done = sum(1 for m in msgs if m.get("role") == "tool")
        if done < want:
            call = {"id": f"call_{done}", "type": "function",
                    "function": {"name": "run_command",
                                 "arguments": json.dumps({"argv": COMMAND})}}
        else:
            call = {"id": f"call_{done}", "type": "function",
                    "function": {"name": "finish", "arguments": "{}"}}
        out = json.dumps({
            "id": f"chatcmpl-{self.server.requests}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "bench"),
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None,
                                     "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 100 + 10 * len(msgs), "completion_tokens": 12,
                      "total_tokens": 112 + 10 * len(msgs)},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def agent_run(c: br.Client, calls: int, poll_s: float) -> tuple:
    """Create an agent run with `calls` tool calls and poll to terminal."""
    t0 = time.perf_counter()
    st, raw = c.request("POST", "/v1/workers/agent/runs", {"input": {"calls": calls}})
    if st != 201:
        raise br.BenchError(f"POST /v1/workers/agent/runs: HTTP {st}: {raw[:200]!r}")
    rid = json.loads(raw)["run"]["id"]
    while True:
        st, raw = c.request("GET", f"/v1/runs/{rid}")
        if st != 200:
            raise br.BenchError(f"GET /v1/runs/{rid}: HTTP {st}: {raw[:200]!r}")
        run = json.loads(raw)["run"]
        if run["state"] in br.TERMINAL or run["state"] == "awaiting_approval":
            return (time.perf_counter() - t0) * 1000, run
        if time.perf_counter() - t0 > br.RUN_TIMEOUT_S:
            raise br.BenchError(f"agent run {rid} still {run['state']!r} after "
                                f"{br.RUN_TIMEOUT_S:.0f} s")
        time.sleep(poll_s)


def approve_with_rule(env: br.Env, data: Path, c: br.Client, run: dict) -> None:
    """The operator approves the first command with a standing argv-prefix
    rule (local CLI, as in the tests)."""
    st, raw = c.request("GET", f"/v1/approvals?state=pending&run={run['id']}")
    items = json.loads(raw).get("approvals", []) if st == 200 else []
    if not items:
        raise br.BenchError(f"run {run['id']} awaits approval but none is pending: {raw[:200]!r}")
    a = items[0]
    br.run_checked([str(br.AIRLOCK), "approvals", "approve", a["id"], "--hash",
                    a["payload_hash"], "--grant", "argv-prefix", "--prefix", COMMAND[0]],
                   env.env(data), env.root, "airlock approvals approve")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="timed rounds (20)")
    ap.add_argument("--calls", type=int, default=10, help="tool calls per timed run (10)")
    ap.add_argument("--poll-ms", type=float, default=2.0, help="GET poll interval (2)")
    ap.add_argument("--output", type=Path, default=RESULTS)
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.runs < 1 or args.calls < 1:
        ap.error("--runs and --calls must be positive")

    def _exit(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _exit)

    if not br.AIRLOCK.exists():
        br.progress(f"{br.AIRLOCK} missing: run cargo build --release -p airlock-cli")
        return 1

    model = ScriptedModel(("127.0.0.1", 0), Handler)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{model.server_address[1]}"

    env = br.Env(args.keep_tmp)
    bundle = env.workers / "agent"
    bundle.mkdir()
    (bundle / "worker.toml").write_text(AGENT_TOML)
    (bundle / "AGENT.md").write_text("# Benchmark agent\nRun the commands you are asked to.\n")
    data = env.data_dir("agent-data")
    profile = env.root / "profile.toml"
    profile.write_text(f'format = "openai-chat"\nbase_url = "{base_url}"\nmodel = "bench"\n'
                       'stream = false\n[prices]\ninput = 0.0\noutput = 0.0\n')
    res = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count()},
        "git": br.capture(["git", "describe", "--always", "--dirty"]),
        "params": {"runs": args.runs, "calls": args.calls, "poll_ms": args.poll_ms},
        "loadavg_start": list(os.getloadavg()),
    }
    srv = None
    rc = 0
    poll = args.poll_ms / 1000
    try:
        br.run_checked([str(br.AIRLOCK), "models", "put", "bench", "--file", str(profile)],
                       env.env(data), env.root, "airlock models put")
        srv = start_server(env, data)
        srv.wait_ready()
        c = br.Client(srv.port, srv.key)

        # First run: the first command waits; approve it with a rule.
        _, run = agent_run(c, 1, poll)
        if run["state"] != "awaiting_approval":
            raise br.BenchError(f"first run ended {run['state']!r} ({run.get('error_code')}), "
                                "expected it to wait for approval")
        approve_with_rule(env, data, c, run)
        while run["state"] not in br.TERMINAL:
            time.sleep(poll)
            run = json.loads(c.request("GET", f"/v1/runs/{run['id']}")[1])["run"]
        if run["state"] != "succeeded":
            raise br.BenchError(f"first run ended {run['state']!r}: {run.get('error_code')}")

        # Warm-up, checked: both shapes succeed without waiting.
        sb_env = env.env(env.data_dir("sandbox-data"))
        bare = [str(br.AIRLOCK), "sandbox", "exec", "--"] + COMMAND
        br.run_checked(bare, sb_env, env.root, "sandbox exec")
        # The same launch as the harness asks for: the worker's default
        # limits, its bundle read-only and a work folder writable.
        work = env.root / "work"
        work.mkdir()
        matched = [str(br.AIRLOCK), "sandbox", "exec", "--memory", "512", "--pids", "256",
                   "--cpus", "1", "--timeout", "300",
                   "--mount", f"{bundle}:/airlock/worker",
                   "--mount", f"{work}:/airlock/work:rw", "--"] + COMMAND
        br.run_checked(matched, sb_env, env.root, "sandbox exec (matched)")
        for calls in (0, args.calls):
            _, run = agent_run(c, calls, poll)
            if run["state"] != "succeeded":
                raise br.BenchError(f"warm-up run with {calls} calls ended {run['state']!r} "
                                    f"({run.get('error_code')})")

        signal.signal(signal.SIGALRM, br._on_alarm)
        samples = {"bare": [], "matched": [], "zero": [], "n": []}
        gc.disable()
        try:
            for r in range(args.runs):
                order = ["bare", "matched", "zero", "n"]
                k = r % len(order)
                for key in order[k:] + order[:k]:
                    if key in ("bare", "matched"):
                        argv = bare if key == "bare" else matched
                        ms, code = br.time_once(argv, sb_env, env.root)
                        if code != 0:
                            raise br.BenchError(f"sandbox exec exited with {code}")
                    else:
                        calls = 0 if key == "zero" else args.calls
                        ms, run = agent_run(c, calls, poll)
                        if run["state"] != "succeeded":
                            raise br.BenchError(f"run {run['id']} ended {run['state']!r} "
                                                f"({run.get('error_code')})")
                    samples[key].append(ms)
                if (r + 1) % 5 == 0:
                    br.progress(f"  {r + 1}/{args.runs} rounds")
        finally:
            gc.enable()
        c.close()
        srv.check_alive()

        med = {k: statistics.median(v) for k, v in samples.items()}
        per_call = (med["n"] - med["zero"]) / args.calls
        res.update({
            "bare_sandbox_exec": br.summary(samples["bare"]),
            "matched_sandbox_exec": br.summary(samples["matched"]),
            "per_tool_call_ratio_to_matched": round(per_call / med["matched"], 3),
            "agent_0_calls": br.summary(samples["zero"]),
            f"agent_{args.calls}_calls": br.summary(samples["n"]),
            "per_tool_call_ms": round(per_call, 3),
            "per_tool_call_ratio_to_bare": round(per_call / med["bare"], 3),
            "model_requests": model.requests,
            "samples_ms": {k: [round(x, 3) for x in v] for k, v in samples.items()},
        })
        print("### Agent harness: one tool call against a bare sandbox launch")
        print()
        print("| case | n | median ms | p95 ms | ratio to bare | ratio to matched |")
        print("|---|---:|---:|---:|---:|---:|")
        rows = [("bare: `airlock sandbox exec -- /bin/true`", "bare"),
                ("matched: the same with the tool's limits and mounts", "matched"),
                ("agent run, 0 tool calls (model finishes at once)", "zero"),
                (f"agent run, {args.calls} × `run_command [/bin/true]`", "n")]
        for label, key in rows:
            s = samples[key]
            print(f"| {label} | {len(s)} | {med[key]:.1f} | {br.p95(s):.1f} | "
                  f"{med[key] / med['bare']:.2f} | {med[key] / med['matched']:.2f} |")
        print(f"| **per tool call** ((N calls − 0 calls) / {args.calls}) | | "
              f"**{per_call:.1f}** | | **{per_call / med['bare']:.2f}** | "
              f"**{per_call / med['matched']:.2f}** |")
        print()
    except br.BenchError as e:
        br.progress(f"error: {e}")
        res["error"] = str(e)
        rc = 1
    finally:
        if srv is not None:
            srv.close()
        model.shutdown()
        env.close()
    res["loadavg_end"] = list(os.getloadavg())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(res, indent=2) + "\n")
    br.progress(f"wrote {args.output}")
    return rc


def start_server(env: br.Env, data: Path) -> br.Server:
    """`airlock up` as bench_runs starts it, with loopback model servers
    allowed (AIRLOCK_MODEL_ALLOW_PRIVATE)."""
    saved = env.base_env
    env.base_env = {**saved, "AIRLOCK_MODEL_ALLOW_PRIVATE": "127.0.0.1/32"}
    try:
        return br.Server(env, "agent", data, None, 4)
    finally:
        env.base_env = saved


if __name__ == "__main__":
    sys.exit(main())
