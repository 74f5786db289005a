#!/usr/bin/env python3
"""Interop test server on the official MCP Python SDK 1.x (PyPI ``mcp==1.30.0``, ``mcp.server.fastmcp.FastMCP``).

The protocol code is the SDK's; this file only declares tools. It stands for every mcp 1.x / FastMCP 2.x-3.x
server in the wild: legacy era only (its stdio loop answers ``server/discover`` with pydantic validation errors on
stderr, the "probe noise" of issue 27), and a pydantic-model parameter whose schema is a ``$ref`` into ``$defs``
(``name_shrimp``, after the SDK's own ``complex_inputs.py`` example).

Usage (needs the mcp 1.x venv, ``.venv-mcp1``, made by ``.ci/install_interop.sh``)::

    python fastmcp1_server.py            # stdio
"""

from __future__ import annotations

import enum
import os
import sys
from typing import Annotated

from mcp.server.fastmcp import FastMCP
from pydantic import BaseModel, Field

mcp = FastMCP("bkmcp-interop-fastmcp1")


class Shrimp(BaseModel):
    name: Annotated[str, Field(max_length=10)]


class ShrimpTank(BaseModel):
    shrimp: list[Shrimp]


class Water(str, enum.Enum):
    fresh = "fresh"
    salt = "salt"
    brackish = "brackish"


@mcp.tool()
def name_shrimp(tank: ShrimpTank, extra_names: Annotated[list[str], Field(max_length=10)]) -> list[str]:
    """List all shrimp names in the tank (a pydantic-model parameter: $ref into $defs)."""
    return [shrimp.name for shrimp in tank.shrimp] + extra_names


@mcp.tool()
def feed(count: int, water: Water, live: bool = False, note: str = "") -> str:
    """Feed the tank: an integer, an enum, a boolean and a string parameter, echoed back."""
    return f"fed {count} in {water.value} water, live={live}, note={note!r}"


@mcp.tool()
def crash(reason: str) -> str:
    """Write the reason on stderr and exit at once: the call fails and its error shows the server's stderr."""
    print(f"fastmcp1_server: giving up: {reason}", file=sys.stderr, flush=True)
    os._exit(3)


if __name__ == "__main__":
    mcp.run()
