"""A real MCP client (the official Python SDK, `mcp` on PyPI) driving
airlock's MCP front end, for crates/airlock-cli/tests/suite/mcp.rs.

    python3 mcp_client.py SCENARIO --transport http|stdio --mode legacy|auto \
        --url http://127.0.0.1:PORT --key alk_... [--airlock BIN] [--args JSON]

Prints one JSON document: what the scenario saw. The Rust test asserts on
it; this script only drives the client and records.
"""

import argparse
import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def transport(a):
    if a.transport == "stdio":
        return stdio_client(
            StdioServerParameters(
                command=a.airlock,
                args=["mcp", "stdio"],
                env={"AIRLOCK_SERVER": a.url, "AIRLOCK_API_KEY": a.key},
            )
        )
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {a.key}"})
    return streamable_http_client(a.url + "/mcp", http_client=http)


def body(result):
    """The structured answer of a tool, or its error text."""
    if result.is_error:
        text = result.content[0].text if result.content else ""
        try:
            return {"is_error": True, "error": json.loads(text)["error"]}
        except (ValueError, KeyError):
            return {"is_error": True, "text": text}
    return result.structured_content


async def wait_settled(client, run_id, progress):
    """get_run until the run settles (each call waits up to its wait_s)."""
    for _ in range(20):
        async def on_progress(p, total, message):
            progress.append({"progress": p, "message": message})

        r = body(await client.call_tool("get_run", {"run_id": run_id, "wait_s": 20}, progress_callback=on_progress))
        if r.get("is_error") or r["settled"]:
            return r
    return r


async def tour(client, a, extra):
    out = {}
    tools = await client.list_tools()
    out["tools"] = sorted(t.name for t in tools.tools)
    out["annotations"] = {
        t.name: {
            "read_only": t.annotations.read_only_hint if t.annotations else None,
            "destructive": t.annotations.destructive_hint if t.annotations else None,
        }
        for t in tools.tools
    }
    out["has_output_schema"] = all(t.output_schema for t in tools.tools)
    out["workers"] = sorted(w["id"] for w in body(await client.call_tool("list_workers", {}))["workers"])
    out["describe"] = body(await client.call_tool("describe_worker", {"worker_id": extra["worker"]}))
    first = body(
        await client.call_tool(
            "start_run",
            {"worker_id": extra["worker"], "input": extra["input"], "idempotency_key": extra["key"]},
        )
    )
    again = body(
        await client.call_tool(
            "start_run",
            {"worker_id": extra["worker"], "input": extra["input"], "idempotency_key": extra["key"]},
        )
    )
    out["start"] = first
    out["start_again"] = again
    progress = []
    out["settled"] = await wait_settled(client, first["run"]["id"], progress)
    out["progress"] = progress
    logs = body(await client.call_tool("read_run_logs", {"run_id": first["run"]["id"]}))
    out["logs"] = logs
    out["logs_after"] = body(
        await client.call_tool("read_run_logs", {"run_id": first["run"]["id"], "after": logs["next_after"]})
    )
    out["runs"] = body(await client.call_tool("list_runs", {"limit": 10}))
    out["secrets"] = body(await client.call_tool("list_secret_names", {}))
    out["audit"] = body(await client.call_tool("verify_audit", {}))
    run_res = await client.read_resource(f"airlock://runs/{first['run']['id']}")
    out["resource_run"] = json.loads(run_res.contents[0].text)
    log_res = await client.read_resource(f"airlock://runs/{first['run']['id']}/log")
    out["resource_log"] = log_res.contents[0].text
    templates = await client.list_resource_templates()
    out["templates"] = sorted(t.uri_template for t in templates.resource_templates)
    # Cancel: a long run, cancelled through the tool.
    slow = body(
        await client.call_tool(
            "start_run", {"worker_id": extra["slow_worker"], "input": {}, "idempotency_key": extra["key"] + "-slow"}
        )
    )
    out["cancel"] = body(await client.call_tool("cancel_run", {"run_id": slow["run"]["id"]}))
    out["cancelled"] = await wait_settled(client, slow["run"]["id"], [])
    out["missing"] = body(await client.call_tool("get_run", {"run_id": "run_missing", "wait_s": 0}))
    return out


async def approvals_start(client, a, extra):
    out = {}
    tools = await client.list_tools()
    out["tools"] = sorted(t.name for t in tools.tools)
    run = body(
        await client.call_tool(
            "start_run", {"worker_id": extra["worker"], "input": {}, "idempotency_key": extra["key"]}
        )
    )
    out["run"] = run
    out["pending"] = body(await client.call_tool("list_approvals", {"state": "pending", "run_id": run["run"]["id"]}))
    a0 = out["pending"]["approvals"][0]
    # This key has no approvals scope: the service refuses.
    out["decide_without_scope"] = body(
        await client.call_tool(
            "decide_approval",
            {"approval_id": a0["id"], "decision": "approve", "payload_hash": a0["payload_hash"]},
        )
    )
    return out


async def approvals_decide(client, a, extra):
    out = {}
    tools = await client.list_tools()
    out["tools"] = sorted(t.name for t in tools.tools)
    out["wrong_hash"] = body(
        await client.call_tool(
            "decide_approval",
            {"approval_id": extra["approval"], "decision": "approve", "payload_hash": "0" * 64},
        )
    )
    out["approved"] = body(
        await client.call_tool(
            "decide_approval",
            {"approval_id": extra["approval"], "decision": "approve", "payload_hash": extra["hash"]},
        )
    )
    out["settled"] = await wait_settled(client, extra["run"], [])
    return out


async def cancel_wait(client, a, extra):
    """A get_run cancelled mid-wait: the call ends, the run goes on."""
    out = {}

    async def waiting():
        await client.call_tool("get_run", {"run_id": extra["run"], "wait_s": 50})

    task = asyncio.create_task(waiting())
    await asyncio.sleep(1.5)
    task.cancel()
    try:
        await task
        out["wait_ended"] = "completed"
    except asyncio.CancelledError:
        out["wait_ended"] = "cancelled"
    out["after"] = body(await client.call_tool("get_run", {"run_id": extra["run"], "wait_s": 0}))
    return out


SCENARIOS = {
    "tour": tour,
    "approvals_start": approvals_start,
    "approvals_decide": approvals_decide,
    "cancel_wait": cancel_wait,
}


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--transport", choices=["http", "stdio"], required=True)
    p.add_argument("--mode", default="legacy")
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--airlock", default="airlock")
    p.add_argument("--args", default="{}")
    a = p.parse_args()
    extra = json.loads(a.args)
    async with Client(transport(a), mode=a.mode, read_timeout_seconds=120, cache=None) as client:
        out = await SCENARIOS[a.scenario](client, a, extra)
        out["protocol_version"] = client.session.protocol_version
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
