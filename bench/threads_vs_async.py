#!/usr/bin/env python3
"""Why the session engine uses threads (docs/design.md): the per-call cost of the sync ``httpx.Client``
(sequential, and 50 threads sharing its pool) against ``httpx.AsyncClient`` (sequential, and 50 concurrent tasks),
measured side by side in one process against the in-process mock server over loopback.

    .venv/bin/python bench/threads_vs_async.py [--calls 400]

Nothing is asserted, only printed (microseconds per call, and the ratio async / threads).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from mock_server.mcp_mock import MockServer  # noqa: E402

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
}
BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": META},
    }
).encode()


def per_call_us(started: float, calls: int) -> float:
    return (time.perf_counter() - started) / calls * 1e6


def sync_side(url: str, calls: int) -> tuple[float, float]:
    client = httpx.Client()
    for _ in range(20):
        client.post(url, content=BODY, headers=HEADERS)
    started = time.perf_counter()
    for _ in range(calls):
        client.post(url, content=BODY, headers=HEADERS)
    sequential = per_call_us(started, calls)

    def work(count: int) -> None:
        for _ in range(count):
            client.post(url, content=BODY, headers=HEADERS)

    threads = [threading.Thread(target=work, args=(calls // 50,)) for _ in range(50)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    concurrent = per_call_us(started, calls // 50 * 50)
    client.close()
    return sequential, concurrent


async def async_side(url: str, calls: int) -> tuple[float, float]:
    async with httpx.AsyncClient() as client:
        for _ in range(20):
            await client.post(url, content=BODY, headers=HEADERS)
        started = time.perf_counter()
        for _ in range(calls):
            await client.post(url, content=BODY, headers=HEADERS)
        sequential = per_call_us(started, calls)
        gate = asyncio.Semaphore(50)

        async def one() -> None:
            async with gate:
                await client.post(url, content=BODY, headers=HEADERS)

        started = time.perf_counter()
        await asyncio.gather(*[one() for _ in range(calls)])
        return sequential, per_call_us(started, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    calls = parser.parse_args().calls
    with MockServer({"versions": ["2026-07-28"]}) as srv:
        sync_seq, sync_conc = sync_side(srv.url, calls)
        async_seq, async_conc = asyncio.run(async_side(srv.url, calls))
    print(f"{'':24}{'sequential':>12}{'50 at once':>12}   (us per call, {calls} calls)")
    print(f"{'httpx.Client + threads':24}{sync_seq:12.0f}{sync_conc:12.0f}")
    print(f"{'httpx.AsyncClient':24}{async_seq:12.0f}{async_conc:12.0f}")
    print(f"{'ratio async / threads':24}{async_seq / sync_seq:12.2f}{async_conc / sync_conc:12.2f}")


if __name__ == "__main__":
    main()
