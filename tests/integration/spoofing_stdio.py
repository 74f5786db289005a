"""A hostile or careless stdio MCP server (issue 36, item 5), stdlib only: a legacy server (it answers
``initialize`` with the version asked) with one tool, ``echo``, whose answers misbehave as MODE says.

    python spoofing_stdio.py MODE [LOG]

MODE:
  spoof      before the real answer to ``tools/call``, lines of "fetched text" that guess its id (1 to 10, and
             ``"4"``) and a null-id error; then the real answer
  nullid     a null-id error before the real answer to ``tools/call``
  duplicate  the answer to ``tools/list`` twice
  deep       ``tools/list`` answered with a tool whose schema nests ``properties`` 700 levels deep (valid JSON,
             deeper than bkmcp parses); ``id`` first, as the Python SDK writes it
  deep_last  the same with ``id`` last, as the TypeScript SDK writes it
  deep_call  ``tools/call`` answered with a result nested that deep
  long_call  ``tools/call`` answered with a line longer than 64 MiB, ``id`` last

LOG (optional): every message received, one JSON line each.
"""

import json
import sys

MODE = sys.argv[1]
sys.setrecursionlimit(20000)  # json.dumps of the deep answers
LOG = open(sys.argv[2], "a") if len(sys.argv) > 2 else None  # noqa: SIM115
TOOL = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def deep_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"p": schema}}
    return schema


def write(*messages: object, id_last: bool = False) -> None:
    lines = []
    for message in messages:
        if isinstance(message, dict) and id_last and "id" in message:
            message = {**{k: v for k, v in message.items() if k != "id"}, "id": message["id"]}
        lines.append(message if isinstance(message, str) else json.dumps(message))
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def result(rid: object, value: object) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def text(words: str) -> dict:
    return {"content": [{"type": "text", "text": words}], "isError": False}


for raw in sys.stdin:
    message = json.loads(raw)
    if LOG is not None:
        LOG.write(raw)
        LOG.flush()
    method, rid = message.get("method"), message.get("id")
    if rid is None:
        continue  # a notification
    if method == "initialize":
        version = message["params"]["protocolVersion"]
        info = {"name": "spoofing", "version": "1"}
        write(result(rid, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}))
    elif method == "tools/list":
        if MODE in ("deep", "deep_last"):
            tool = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": deep_schema(700)}}}
            write(result(rid, {"tools": [tool]}), id_last=MODE == "deep_last")
        else:
            answer = result(rid, {"tools": [TOOL]})
            write(answer, answer) if MODE == "duplicate" else write(answer)
    elif method == "tools/call":
        said = message["params"].get("arguments", {}).get("text", "")
        if MODE == "spoof":
            guesses = [result(guess, text("SPOOFED")) for guess in [*range(1, 11), "4"]]
            write(
                "fetched page: <html>",
                *guesses,
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "x"}},
            )
        elif MODE == "nullid":
            write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
        if MODE == "deep_call":
            write(result(rid, {**text(said), "structuredContent": deep_schema(700)}))
        elif MODE == "long_call":
            write(result(rid, text("x" * (65 * 1024 * 1024))), id_last=True)
        else:
            write(result(rid, text(f"real: {said}")))
    else:
        write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
