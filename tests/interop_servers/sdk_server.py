#!/usr/bin/env python3
"""Interop test server built on the official MCP Python SDK (PyPI ``mcp==2.3.0``).

Nobody on the bkmcp team wrote the protocol code this exercises: everything on
the wire comes from ``mcp.server.mcpserver.MCPServer`` (Starlette + uvicorn for
Streamable HTTP, the SDK's stdio loop for ``--stdio``).  This file only declares
tools with realistic, pydantic-generated input/output schemas and picks the
transport options.

Usage (needs the SDK venv, Python >= 3.10)::

    python sdk_server.py --port N --variant stateful-sse     # HTTP, http://127.0.0.1:N/mcp
    python sdk_server.py --port N --variant stateless-json
    python sdk_server.py --port N --variant legacy-pinned
    python sdk_server.py --variant stateful-sse --stdio      # stdio (port ignored)
    python sdk_server.py --variant legacy-pinned --stdio

Variants
--------
stateful-sse    SDK defaults: ``stateless_http=False, json_response=False``. Dual-era:
                legacy (initialize + Mcp-Session-Id, SSE responses) and modern
                2026-07-28 (routed by the ``MCP-Protocol-Version`` header).
stateless-json  ``stateless_http=True, json_response=True``. Dual-era; legacy path has
                no session id and answers ``application/json``.
legacy-pinned   The SDK has NO switch to turn the 2026-07-28 era off (the session
                manager routes every non-handshake ``MCP-Protocol-Version`` value to
                the modern handler).  This variant runs the stateful SSE app behind a
                tiny ASGI gate that restores the SDK 1.x legacy version check, so the
                server behaves like a legacy-only ``mcp`` 1.x server: a request with a
                non-handshake ``MCP-Protocol-Version`` gets ``400`` ``-32600
                "Bad Request: Unsupported protocol version: ..."`` (with a session id)
                or ``400 -32600 "Bad Request: Missing session ID"`` (without one);
                ``server/discover`` inside a legacy session is ``-32601`` (SDK behaviour).
                On stdio it runs the SDK's handshake-only ``serve_loop`` (no era
                gate needed: that loop never speaks 2026-07-28).

``--input-fixtures`` adds the SEP-2322 input_required fixtures of the SDK's own everything-server
(python-sdk@57394b0548d1 examples/servers/everything-server, 2026-08-20; handlers re-declared here, same names and
shapes): the tools ``test_input_required_result_elicitation``, ``_request_state``, ``_multi_round``,
``_tampered_state``, ``_sampling``, ``_list_roots`` and the prompt ``test_input_required_result_prompt``, with the
SDK's sealed request state under a fixed key (so a state minted by one server process opens in the next, as in a
deployment with a shared key).

``--everything-fixtures`` adds the resources, resource template and prompts of the same everything-server
(python-sdk@57394b0548d1, 2026-08-20; re-declared here with the same ``MCPServer`` decorators, so the same names, URIs,
MIME types and arguments): the resources ``test://static-text``, ``test://static-binary`` (the 1x1 PNG's bytes) and
``test://watched-resource``, the template ``test://template/{id}/data`` and the prompts ``test_simple_prompt``,
``test_prompt_with_arguments`` (``arg1``, ``arg2``), ``test_prompt_with_embedded_resource`` (``resourceUri``) and
``test_prompt_with_image`` (its fifth prompt, ``test_input_required_result_prompt``, is under ``--input-fixtures``).

Readiness: HTTP variants log uvicorn's ``Uvicorn running on http://127.0.0.1:N``
line on stderr once the socket is bound, and this script first prints
``sdk_server: starting variant=... url=...`` on stderr.  Poll the TCP port.
The server binds 127.0.0.1 only. With BKMCP_INTEROP_PARENT_PID=<pid> it exits once its parent
process is no longer that pid (set by the pytest fixtures for HTTP servers).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import os
import sys
import threading
import time
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ListRootsRequest,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel, Field

VARIANTS = ("stateful-sse", "stateless-json", "legacy-pinned")
HOST = "127.0.0.1"
PATH = "/mcp"


# --------------------------------------------------------------------------- tools


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


class Shape(BaseModel):
    """A nested model: produces $defs/$ref in the tool's inputSchema."""

    name: str
    points: list[Point]
    closed: bool = False
    tags: list[str] | None = None


class WeatherReport(BaseModel):
    city: str
    temperature_c: float
    conditions: Literal["sunny", "cloudy", "rain"]
    humidity_pct: int = Field(ge=0, le=100)


def build_server(name: str, input_fixtures: bool = False, everything_fixtures: bool = False) -> MCPServer:
    options: dict[str, Any] = {}
    if input_fixtures:
        from mcp.server.mcpserver import RequestStateSecurity

        options["request_state_security"] = RequestStateSecurity(keys=[b"bkmcp-interop-fixture-request-state-key!"])
    mcp = MCPServer(
        name,
        version="2.3.0-interop",
        instructions="bkmcp interop test server (official MCP Python SDK 2.3.0)",
        **options,
    )
    if input_fixtures:
        add_input_fixtures(mcp)
    if everything_fixtures:
        add_everything_fixtures(mcp)

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @mcp.tool()
    def echo(text: str, times: int = 1, upper: bool = False) -> str:
        """Echo text, optionally repeated and upper-cased."""
        out = " ".join([text] * times)
        return out.upper() if upper else out

    @mcp.tool(structured_output=False)
    def greet(name: str, title: str | None = None) -> str:
        """Greet someone; title is optional and nullable (anyOf string/null). Unstructured: no outputSchema."""
        return f"Hello, {title + ' ' if title else ''}{name}!"

    @mcp.tool()
    def choose(mode: Literal["a", "b"], color: Color = Color.red) -> dict[str, str]:
        """Literal and enum parameters."""
        return {"mode": mode, "color": color.value}

    @mcp.tool()
    def summarize(values: list[int], shape: Shape, weights: dict[str, float] | None = None) -> dict[str, Any]:
        """Array of integers plus a nested pydantic model ($defs/$ref)."""
        return {
            "count": len(values),
            "sum": sum(values),
            "shape": shape.name,
            "n_points": len(shape.points),
            "closed": shape.closed,
            "weights": weights,
        }

    @mcp.tool()
    def echo_float(value: float) -> float:
        """Return the float argument unchanged (number-fidelity probe)."""
        return value

    @mcp.tool()
    def echo_json(payload: dict[str, Any]) -> dict[str, Any]:
        """Return an arbitrary JSON object unchanged."""
        return payload

    @mcp.tool()
    def fail(message: str = "boom") -> str:
        """Always raises ValueError: isError=true, text is only "Error executing tool fail" (SDK hides crash text)."""
        raise ValueError(message)

    @mcp.tool()
    def fail_tool_error(message: str = "deliberate failure") -> str:
        """Raises the SDK's ToolError: isError=true and the message reaches the client."""
        raise ToolError(message)

    @mcp.tool()
    def weather(city: str) -> WeatherReport:
        """Structured output (outputSchema from a pydantic model)."""
        return WeatherReport(city=city, temperature_c=21.5, conditions="sunny", humidity_pct=40)

    @mcp.tool(structured_output=False)
    def no_args() -> str:
        """A tool without parameters (unstructured: no outputSchema)."""
        return "ok"

    @mcp.tool(name="ns.tool-name_v2", title="Dotted / dashed name")
    def dotted(
        value: Annotated[str, Field(description="Any string", min_length=1, max_length=64)],
        count: Annotated[int, Field(description="Between 1 and 5", ge=1, le=5)] = 1,
    ) -> str:
        """Tool whose name contains '.', '-' and '_' and whose params carry constraints."""
        return value * count

    @mcp.tool()
    async def slow(ctx: Context, seconds: Annotated[float, Field(ge=0, le=30)] = 0.5, steps: int = 3) -> str:
        """Sleeps, emitting progress and log notifications (forces SSE on the modern path)."""
        steps = max(1, min(steps, 50))
        for i in range(steps):
            await ctx.report_progress(i, steps, f"step {i}")
            await ctx.info(f"slow: step {i}")
            await asyncio.sleep(seconds / steps)
        await ctx.report_progress(steps, steps, "done")
        return f"slept {seconds}s"

    return mcp


# --------------------------------------------------------------------------- legacy gate


def legacy_gate(app: Any, path: str = PATH) -> Any:
    """ASGI wrapper restoring the mcp 1.x legacy-only behaviour in front of the 2.3.0 dual-era app.

    * ``MCP-Protocol-Version`` outside the handshake versions:
      - with ``Mcp-Session-Id`` -> 400 -32600 "Bad Request: Unsupported protocol version: X. Supported versions: ..."
        (text of python-sdk 1.x ``StreamableHTTPServerTransport._validate_protocol_version``);
      - without a session id -> the header is dropped and the request goes to the SDK's legacy path, which
        answers ``initialize`` normally and everything else with 400 "Bad Request: Missing session ID"
        (the same order of checks as 1.x: session first, version second).
    ``server/discover`` inside a legacy session needs no gate: the SDK's legacy loop already answers it with
    JSON-RPC -32601 "Method not found" (``data: "server/discover"``), as a 1.x server does.
    """
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    supported = ", ".join(sorted(HANDSHAKE_PROTOCOL_VERSIONS, reverse=True))

    async def send_json(send: Any, status: int, body: dict[str, Any], extra: list[tuple[bytes, bytes]]) -> None:
        raw = json.dumps(body, separators=(",", ":")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())] + extra
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": raw})

    async def gated(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path", "").rstrip("/") != path.rstrip("/"):
            await app(scope, receive, send)
            return
        headers = list(scope["headers"])
        pv = next((v.decode("latin-1") for k, v in headers if k == b"mcp-protocol-version"), None)
        sid = next((v for k, v in headers if k == b"mcp-session-id"), None)

        if pv is not None and pv not in HANDSHAKE_PROTOCOL_VERSIONS:
            if sid is not None:
                await send_json(
                    send,
                    400,
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32600,
                            "message": f"Bad Request: Unsupported protocol version: {pv}. "
                            f"Supported versions: {supported}",
                        },
                    },
                    [(b"mcp-session-id", sid)],
                )
                return
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in headers if k != b"mcp-protocol-version"]
        await app(scope, receive, send)

    return gated


# --------------------------------------------------------------------------- main


def add_input_fixtures(mcp: MCPServer) -> None:
    """The everything-server's SEP-2322 fixtures (see the module docstring)."""
    name_schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    ok_schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

    def ask(message: str, schema: dict[str, Any]) -> ElicitRequest:
        return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))

    def field(answer: Any, key: str) -> Any:
        return answer.content.get(key) if isinstance(answer, ElicitResult) and answer.content else None

    @mcp.tool()
    async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
        """Tests InputRequiredResult with a single elicitation request"""
        responses = ctx.input_responses
        if responses and "user_name" in responses:
            return f"Hello, {field(responses['user_name'], 'name') or 'stranger'}!"
        return InputRequiredResult(input_requests={"user_name": ask("What is your name?", name_schema)})

    @mcp.tool()
    async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
        """Tests requestState round-tripping in the InputRequiredResult flow"""
        responses = ctx.input_responses
        if responses and "confirm" in responses and ctx.request_state == "request-state-nonce":
            return "state-ok: confirmation received"
        return InputRequiredResult(
            input_requests={"confirm": ask("Please confirm", ok_schema)}, request_state="request-state-nonce"
        )

    @mcp.tool()
    async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
        """Tests a three-round InputRequiredResult flow with evolving requestState"""
        state = json.loads(ctx.request_state) if ctx.request_state else {"round": 0}
        responses = ctx.input_responses or {}
        if state["round"] == 1 and "step1" in responses:
            color = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
            return InputRequiredResult(
                input_requests={"step2": ask("Step 2: What is your favorite color?", color)},
                request_state=json.dumps({"round": 2, "name": field(responses["step1"], "name")}),
            )
        if state["round"] == 2 and "step2" in responses:
            return f"{state.get('name')} likes {field(responses['step2'], 'color')}."
        return InputRequiredResult(
            input_requests={"step1": ask("Step 1: What is your name?", name_schema)},
            request_state=json.dumps({"round": 1}),
        )

    @mcp.tool()
    async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
        """Tests that the server rejects a tampered requestState echo"""
        if ctx.request_state is None:
            return InputRequiredResult(
                input_requests={"confirm": ask("Please confirm", ok_schema)}, request_state="round-1"
            )
        return f"state-ok: {ctx.request_state}"

    @mcp.tool()
    async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
        """Tests InputRequiredResult with a single sampling request"""
        if ctx.input_responses and "capital_question" in ctx.input_responses:
            return "Model answered"
        message = SamplingMessage(role="user", content=TextContent(type="text", text="What is the capital of France?"))
        params = CreateMessageRequestParams(messages=[message], max_tokens=100)
        return InputRequiredResult(input_requests={"capital_question": CreateMessageRequest(params=params)})

    @mcp.tool()
    async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
        """Tests InputRequiredResult with a single roots/list request"""
        if ctx.input_responses and "client_roots" in ctx.input_responses:
            return "Client exposed roots"
        return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})

    @mcp.prompt()
    async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
        """Tests InputRequiredResult from prompts/get (SEP-2322 non-tool request)"""
        responses = ctx.input_responses
        if responses and "user_context" in responses:
            text = field(responses["user_context"], "context") or "?"
            return [
                UserMessage(role="user", content=TextContent(type="text", text=f"Use the following context: {text}"))
            ]
        schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
        return InputRequiredResult(input_requests={"user_context": ask("What context should the prompt use?", schema)})


# the everything-server's 1x1 PNG (python-sdk@57394b0548d1 examples/servers/everything-server, TEST_IMAGE_BASE64)
TEST_IMAGE_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def add_everything_fixtures(mcp: MCPServer) -> None:
    """The everything-server's resources, resource template and prompts (see the module docstring)."""
    import base64

    from mcp.types import EmbeddedResource, ImageContent, TextResourceContents

    @mcp.resource("test://static-text")
    def static_text_resource() -> str:
        """A static text resource for testing"""
        return "This is the content of the static text resource."

    @mcp.resource("test://static-binary")
    def static_binary_resource() -> bytes:
        """A static binary resource (image) for testing"""
        return base64.b64decode(TEST_IMAGE_BASE64)

    @mcp.resource("test://template/{id}/data")
    def template_resource(id: str) -> str:
        """A resource template with parameter substitution"""
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @mcp.resource("test://watched-resource")
    def watched_resource() -> str:
        """A resource that can be subscribed to for updates"""
        return "Watched resource content"

    @mcp.prompt()
    def test_simple_prompt() -> list[UserMessage]:
        """A simple prompt without arguments"""
        return [UserMessage(role="user", content=TextContent(type="text", text="This is a simple prompt for testing."))]

    @mcp.prompt()
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        """A prompt with required arguments"""
        text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
        return [UserMessage(role="user", content=TextContent(type="text", text=text))]

    @mcp.prompt()
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:  # noqa: N803 (the SDK's name)
        """A prompt that includes an embedded resource"""
        text = "Embedded resource content for testing."
        resource = TextResourceContents(uri=resourceUri, mime_type="text/plain", text=text)
        return [
            UserMessage(role="user", content=EmbeddedResource(type="resource", resource=resource)),
            UserMessage(
                role="user", content=TextContent(type="text", text="Please process the embedded resource above.")
            ),
        ]

    @mcp.prompt()
    def test_prompt_with_image() -> list[UserMessage]:
        """A prompt that includes image content"""
        image = ImageContent(type="image", data=TEST_IMAGE_BASE64, mime_type="image/png")
        return [
            UserMessage(role="user", content=image),
            UserMessage(role="user", content=TextContent(type="text", text="Please analyze the image above.")),
        ]


async def _serve_http(mcp: MCPServer, variant: str, port: int, log_level: str) -> None:
    import uvicorn

    app = mcp.streamable_http_app(
        streamable_http_path=PATH,
        json_response=(variant == "stateless-json"),
        stateless_http=(variant == "stateless-json"),
        host=HOST,
    )
    if variant == "legacy-pinned":
        app = legacy_gate(app)
    config = uvicorn.Config(app, host=HOST, port=port, log_level=log_level, lifespan="on", access_log=True)
    await uvicorn.Server(config).serve()


async def _serve_stdio_legacy(mcp: MCPServer) -> None:
    """Handshake-only stdio loop (the SDK's ``serve_loop``; never speaks 2026-07-28)."""
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    low = mcp._lowlevel_server  # the SDK exposes no public accessor for this
    async with stdio_server() as (read_stream, write_stream):
        async with low.lifespan(low) as state:
            await serve_loop(
                low,
                read_stream,
                write_stream,
                lifespan_state=state,
                init_options=low.create_initialization_options(),
            )


def _exit_with_parent() -> None:
    """If BKMCP_INTEROP_PARENT_PID is set (the pytest fixtures set it), exit once that parent is gone.

    Keeps a server from outliving a test run that was SIGKILLed before its teardown.
    """
    raw = os.environ.get("BKMCP_INTEROP_PARENT_PID", "")
    if not raw.isdigit():
        return
    parent = int(raw)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                print("sdk_server: parent process gone, exiting", file=sys.stderr, flush=True)
                os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (HTTP variants; required unless --stdio)")
    p.add_argument("--variant", choices=VARIANTS, default="stateful-sse")
    p.add_argument("--stdio", action="store_true", help="serve on stdin/stdout instead of HTTP")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--input-fixtures", action="store_true", help="add the SEP-2322 input_required fixtures")
    p.add_argument(
        "--everything-fixtures", action="store_true", help="add the everything-server's resources and prompts"
    )
    args = p.parse_args(argv)

    _exit_with_parent()
    mcp = build_server(
        f"bkmcp-interop-sdk-{args.variant}",
        input_fixtures=args.input_fixtures,
        everything_fixtures=args.everything_fixtures,
    )
    if args.stdio:
        print(f"sdk_server: starting variant={args.variant} transport=stdio", file=sys.stderr, flush=True)
        if args.variant == "legacy-pinned":
            asyncio.run(_serve_stdio_legacy(mcp))
        else:
            mcp.run("stdio")
        return 0
    if not (0 < args.port < 65536):
        p.error("--port N (1..65535) is required for HTTP variants")
    print(
        f"sdk_server: starting variant={args.variant} url=http://{HOST}:{args.port}{PATH}",
        file=sys.stderr,
        flush=True,
    )
    try:
        asyncio.run(_serve_http(mcp, args.variant, args.port, args.log_level))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
