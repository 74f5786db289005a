"""Bad input through the real entry point in fresh interpreters (issue 11 item 2): the generators, the runner
and the outcome check used by test_fresh_fuzz.py.

Every example is one new process, `python -S -m bkmcp ...` (the source tree, from bytecode compiled once per
Python) or `python -S bkmcp.pyz ...`, so `json` is never preloaded (pytest always has it, which hid the 3.10/3.11
scanner failure from the in-process fuzz). `-S` keeps the host's site-packages out: this machine's 3.11 runs a
.pth file at every start (a third of a bare start-up), and no site module may import json before bkmcp does;
`python -S -c "import sys; print('json' in sys.modules)"` is checked once per interpreter.

Inputs come from a seeded generator (BKMCP_FRESH_FUZZ_SEED, default 11): each target's classic typos first, then
mutations of valid seeds (delete, insert, replace, truncate, duplicate, typo snippets, invalid UTF-8). A failure
prints the exact command line to replay it. Examples run concurrently on a small thread pool of subprocesses
(BKMCP_FRESH_FUZZ_WORKERS, default 2: the CI machine has 2 cores).
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shlex
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAFETY = 60  # seconds: hard kill of an example that would hang (a safety net, never a threshold)
SEED = int(os.environ.get("BKMCP_FRESH_FUZZ_SEED", "11"))
WORKERS = int(os.environ.get("BKMCP_FRESH_FUZZ_WORKERS", str(min(2, os.cpu_count() or 1))))
# examples per target: on the build Python (the one running pytest) and on each other CPython
EXAMPLES_BUILD = int(os.environ.get("BKMCP_FRESH_FUZZ_EXAMPLES", "60"))
EXAMPLES_OTHER = int(os.environ.get("BKMCP_FRESH_FUZZ_EXAMPLES_OTHER", "20"))


def documented_codes() -> dict[str, set[int]]:
    """code -> exit statuses, from the table of docs/errors.md (the contract the envelopes must keep)."""
    codes: dict[str, set[int]] = {}
    for line in (ROOT / "docs" / "errors.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([a-z_]+)` \| ([0-9]+(?: or [0-9]+)?) \|", line)
        if match:
            codes[match.group(1)] = {int(x) for x in match.group(2).split(" or ")}
    return codes


DOCUMENTED = documented_codes()


# -- the examples ------------------------------------------------------------------------------------------


@dataclass
class Example:
    """One command line: argv after the entry, optional stdin bytes, files to write first (path -> bytes)."""

    target: str
    args: list[str | bytes]
    stdin: bytes = b""
    files: dict[str, bytes] = field(default_factory=dict)
    allowed: frozenset[str] = frozenset()  # error codes this target may answer with
    server_id: str | None = None  # flags target: the mock connection whose log must be checked


JSON_ALPHABET = list("{}[]\":,.-+eE0123456789 \n\tabcdeflnrstu\\/'$") + ["\x00", "\x01", "é", "\u2028", "\ud800"]
JSON_SNIPPETS = [
    ",",
    ",}",
    "}",
    "]",
    '"',
    "'",
    "1e",
    "NaN",
    "Infinity",
    "//c",
    "/*",
    "\\",
    "\\u12",
    "\\x",
    "01",
    "\ufeff",
    "tru",
    "nul",
    "${",
    "${ÄÖ}",
    "$${",
    '{"a":1,"a":2}',
    "[" * 40,
    "-",
    ".5",
    "1.",
    "\t\n",
]
JQ_ALPHABET = list('.[]|(){}:,"\\ $@?+-*/%=<>!;abcdefgiklmnoprstuvy0123456789_') + ["\x00", "é"]
JQ_SNIPPETS = [
    "|",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    '"',
    "\\(",
    ".[]",
    "..",
    "?",
    "//",
    "error",
    "tostring",
    "fromjson",
    "keys",
    "@base64d",
    "not",
    "$x",
    "as $x",
    "reduce",
    "foreach",
    "if",
    "then",
    "else",
    "end",
    "and",
    "or",
]


def mutate(rng: random.Random, text: str, alphabet: list[str], snippets: list[str]) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(text))
        op = rng.randrange(6)
        if op == 0:
            text = text[:i] + text[i + rng.randint(1, 4) :]
        elif op == 1:
            text = text[:i] + rng.choice(alphabet) + text[i:]
        elif op == 2 and text:
            j = min(i, len(text) - 1)
            text = text[:j] + rng.choice(alphabet) + text[j + 1 :]
        elif op == 3:
            text = text[:i]
        elif op == 4:
            j = rng.randint(i, min(len(text), i + 12))
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + rng.choice(snippets) + text[i:]
    return text


def to_bytes(rng: random.Random, text: str) -> bytes:
    """UTF-8, lone surrogates kept as (invalid) bytes; sometimes an invalid byte on top."""
    raw = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        i = rng.randint(0, len(raw))
        raw = raw[:i] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf"]) + raw[i:]
    return raw


def argv_bytes(raw: bytes) -> bytes:
    return raw.replace(b"\x00", b"")  # argv cannot carry NUL


VALID_CONFIG = json.dumps(
    {
        "mcpServers": {
            "srv": {
                "type": "http",
                "url": "http://127.0.0.1:9/mcp?x=1",
                "headers": {"Authorization": "Bearer ${FUZZ_TOKEN}", "X-Tenant": "t1"},
                "protocolVersion": "2025-06-18",
            },
            "fs": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "pkg", "${FUZZ_DIR}"],
                "env": {"API_KEY": "${FUZZ_TOKEN}"},
                "cwd": "/srv",
            },
        }
    },
    indent=1,
)
CONFIG_TYPOS = [
    "{bad",
    VALID_CONFIG[:-2] + ",}}",
    VALID_CONFIG.replace('"t1"', '"t1'),
    VALID_CONFIG.replace('"t1"', "1e"),
    VALID_CONFIG.replace('"2025-06-18"', "1e"),
    VALID_CONFIG + "\n// comment",
    "{'mcpServers': {}}",
    "",
    "   ",
    "\ufeff" + VALID_CONFIG,
    VALID_CONFIG.replace('"t1"', "NaN"),
    VALID_CONFIG.replace('"X-Tenant"', '"Authorization"'),
    VALID_CONFIG.replace("${FUZZ_TOKEN}", "${ÄÖ}"),
    VALID_CONFIG.replace('"fs"', '"--check"'),
    VALID_CONFIG.replace('"fs"', '"srv"'),
    "[" * 100000,
    '{"mcpServers": {"srv": {"type": "http", "url": "x"}}}',
    '{"mcpServers": []}',
    "null",
    VALID_CONFIG.replace('"t1"', '"\\ud800"'),
    VALID_CONFIG.replace('"t1"', '"\x01"'),
]
CONFIG_CODES = frozenset(
    {"invalid_mcp_config", "mcp_server_not_found", "missing_environment_variable", "mcp_auth_conflict"}
)

VALID_BODY = '{"text": "hi", "count": 3, "ratio": 0.5, "tags": ["a", "b"], "options": {"x": 1e400, "y": null}}'
BODY_TYPOS = [
    "{bad",
    '{"a": 1,}',
    '{"a": "unterminated',
    '{"a": 1e}',
    "[1, 2]",
    '"text"',
    "",
    " \n",
    "{} {}",
    '{"a": NaN}',
    '{"a": 1, "a": 2}',
    "{'a': 1}",
    '{"a": 01}',
    "[" * 100000,
    '{"a": "\\ud800"}',
    '{"a": "\x01"}',
    "\ufeff{}",
    '{"a": [1, 2}',
]
BODY_CODES = frozenset({"invalid_mcp_arguments"})

JQ_SEEDS = [
    ".data.arguments",
    ".data | keys",
    ".ok and .data.dry_run",
    "[.data.unverified[] | ascii_upcase]",
    ".data.headers | to_entries | map(.key)",
    'if .ok then .data.server else error("no") end',
    '.data.url | test("127")',
    "{a: .data.tool, b: (.data.unverified | length)}",
    '"\\(.data.server)-\\(.data.tool)"',
    '.data.arguments.a // "none"',
    '.[] | select(type == "object")',
    ".data | tostring | fromjson | .tool",
    '.data.unverified | join(",")',
    "[paths] | length",
]
JQ_TYPOS = [
    ".[",
    ".a |",
    "{",
    '"unterminated',
    ".a.b[",
    'error("x")',
    "1/0",
    ".data | fromjson",
    "",
    " ",
    ".data.",
    "|",
    "[.[] | .x] | .[0].y.z",
    "$undefined",
    "@nope",
    ".data.arguments | keys[0] | tonumber",
]
JQ_CODES = frozenset({"invalid_jq_expression", "jq_error", "jq_unavailable"})

FLAG_SEEDS = {
    "text": ["hi", "", "-x", "a b", "${X}", "网关", "--count"],
    "count": ["3", "-1", "1e3", "0x10", "", "99999999999999999999999", "3.0"],
    "ratio": ["0.5", "1e400", "NaN", "-0", ".5", "1", "12345678901234567890.5"],
    "loud": ["true", "false", "yes", "1", ""],
    "tags": ['["a","b"]', "[]", '"a"', "a,b", "[1]", '["x",]'],
    "options": ['{"x": 1e5}', "{}", "[]", '{"a":1,"a":2}', '{"a": {"b": [1, 2]}}', "{bad"],
}
FLAG_TYPOS = [
    ["--text=hi", "--count=1e"],
    ["--text=hi", "--tags=[1,"],
    ["--text=hi", "--options={bad"],
    ["--text=hi", "--ratio=NaN"],
    ["--text=hi", "--loud=maybe"],
    ["--count=3"],
    ["--text"],
    ["--text=hi", "--nope=1"],
    ["--text=hi", '--options={"a": 1e}'],
    ["--text=hi", '--tags="unterminated'],
    ["--text=hi", "--options=[" + "[" * 5000],
]
FLAG_CODES = frozenset({"invalid_mcp_arguments", "usage_error"})


def _dry(config: str, *rest: str | bytes) -> list[str | bytes]:
    return ["--config", config, "srv", "t", *rest]


def config_examples(rng: random.Random, count: int, work: Path, good_config: str) -> list[Example]:
    texts = list(CONFIG_TYPOS)
    while len(texts) < count:
        texts.append(VALID_CONFIG if rng.random() < 0.1 else mutate(rng, VALID_CONFIG, JSON_ALPHABET, JSON_SNIPPETS))
    out = []
    for i, text in enumerate(texts[: max(count, len(CONFIG_TYPOS))]):
        path = str(work / f"config-{i}.json")
        out.append(
            Example(
                "config",
                _dry(path, "--body", "{}", "--dry-run"),
                files={path: to_bytes(rng, text)},
                allowed=CONFIG_CODES,
            )
        )
    return out


def body_examples(rng: random.Random, count: int, work: Path, good_config: str) -> list[Example]:
    texts = [t for t in BODY_TYPOS for _ in range(3)]  # each typo through each source
    while len(texts) < count:
        texts.append(VALID_BODY if rng.random() < 0.1 else mutate(rng, VALID_BODY, JSON_ALPHABET, JSON_SNIPPETS))
    out = []
    for i, text in enumerate(texts[: max(count, len(BODY_TYPOS) * 3)]):
        raw = to_bytes(rng, text)
        source = i % 3
        if source == 0:
            inline = _dry(good_config, b"--body=" + argv_bytes(raw), "--dry-run")
            out.append(Example("body", inline, allowed=BODY_CODES))
        elif source == 1:
            path = str(work / f"body-{i}.json")
            out.append(
                Example(
                    "body", _dry(good_config, "--body", "@" + path, "--dry-run"), files={path: raw}, allowed=BODY_CODES
                )
            )
        else:
            out.append(Example("body", _dry(good_config, "--body", "-", "--dry-run"), stdin=raw, allowed=BODY_CODES))
    return out


def jq_examples(rng: random.Random, count: int, work: Path, good_config: str) -> list[Example]:
    programs = list(JQ_TYPOS) + list(JQ_SEEDS)
    while len(programs) < count:
        seed = rng.choice(JQ_SEEDS)
        programs.append(seed if rng.random() < 0.1 else mutate(rng, seed, JQ_ALPHABET, JQ_SNIPPETS))
    return [
        Example(
            "jq",
            _dry(good_config, "--body", VALID_BODY, "--dry-run", b"--jq=" + argv_bytes(to_bytes(rng, p))),
            allowed=JQ_CODES,
        )
        for p in programs[: max(count, len(JQ_TYPOS))]
    ]


def flag_examples(rng: random.Random, count: int, work: Path, flags_config: str) -> list[Example]:
    lines: list[list[str | bytes]] = [list(t) for t in FLAG_TYPOS]
    while len(lines) < count:
        tokens: list[str | bytes] = []
        for name, seeds in FLAG_SEEDS.items():
            if name != "text" and rng.random() < 0.5:
                continue
            if name == "text" and rng.random() < 0.05:
                continue  # the required flag missing
            value = rng.choice(seeds)
            if rng.random() < 0.5:
                value = mutate(rng, value, JSON_ALPHABET, JSON_SNIPPETS)
            raw = argv_bytes(to_bytes(rng, value))
            if rng.random() < 0.8:
                tokens.append(f"--{name}=".encode() + raw)
            else:
                tokens += [f"--{name}", raw]
        if rng.random() < 0.05:
            tokens.append("--unknown-flag=1")
        lines.append(tokens)
    out = []
    for i, tokens in enumerate(lines[: max(count, len(FLAG_TYPOS))]):
        sid = f"flags-{i}-{rng.randrange(1 << 30)}"
        out.append(
            Example("flags", ["--config", flags_config, "m", "echo", *tokens], allowed=FLAG_CODES, server_id=sid)
        )
    return out


GENERATORS: dict[str, Callable[[random.Random, int, Path, str], list[Example]]] = {
    "config": config_examples,
    "body": body_examples,
    "jq": jq_examples,
    "flags": flag_examples,
}


# -- the mock server behind a stdio relay ------------------------------------------------------------------

RELAY = r"""
import os, select, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
watch = [0, s.fileno()]
while True:
    ready = select.select(watch, [], [])[0]
    if 0 in ready:
        data = os.read(0, 65536)
        if data:
            s.sendall(data)
        else:
            s.shutdown(socket.SHUT_WR)
            watch.remove(0)
    if s.fileno() in ready:
        data = s.recv(65536)
        if not data:
            break
        while data:
            data = data[os.write(1, data):]
"""


class RelayedMock:
    """`mock_server/mcp_mock.py`'s stdio server, one per connection, in this process behind a Unix socket; the
    stdio "server process" bkmcp starts is a few-line relay (`python -S -c RELAY SOCKET ID`), so each example
    pays for a bare interpreter instead of the mock's imports, and every request log stays inspectable here."""

    def __init__(self) -> None:
        from mock_server.mcp_mock import Core, RequestLog, StdioServer

        self._classes = (Core, RequestLog, StdioServer)
        self.dir = tempfile.mkdtemp(prefix="bkfz")  # short: a Unix socket path has at most 107 bytes
        self.path = os.path.join(self.dir, "mock.sock")
        self.logs: dict[str, Any] = {}
        self._done: dict[str, threading.Event] = {}
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(self.path)
        self._sock.listen(64)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        core_cls, log_cls, server_cls = self._classes
        rfile, wfile = conn.makefile("rb"), conn.makefile("wb")
        sid = rfile.readline().decode().strip()
        log = self.logs[sid] = log_cls()
        done = self._done.setdefault(sid, threading.Event())
        try:
            server_cls(core_cls({"versions": ["2025-11-25"]}, log), rfile, wfile, io.BytesIO()).run()
        finally:
            for closing in (wfile.close, rfile.close, lambda: conn.shutdown(socket.SHUT_RDWR), conn.close):
                try:
                    closing()
                except OSError:
                    pass
            done.set()

    def received(self, sid: str) -> list[dict]:
        done = self._done.setdefault(sid, threading.Event())
        if sid in self.logs:
            done.wait(SAFETY)  # the relay ends only after the handler closed; this is a safety net
        log = self.logs.get(sid)
        return log.snapshot() if log is not None else []

    def config(self, relay_python: str) -> dict:
        return {
            "mcpServers": {
                "m": {
                    "type": "stdio",
                    "command": relay_python,
                    "args": ["-S", "-c", RELAY, self.path, "${FUZZ_ID}"],
                    "protocolVersion": "2025-11-25",
                }
            }
        }

    def close(self) -> None:
        self._sock.close()
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


# -- running and judging -----------------------------------------------------------------------------------


def shown(args: list[str | bytes]) -> str:
    return " ".join(shlex.quote(os.fsdecode(a) if isinstance(a, bytes) else a) for a in args)


def judge(example: Example, proc: subprocess.CompletedProcess[bytes], mock: RelayedMock | None) -> str | None:
    """Why this outcome breaks the contract, or None: exit 0, or a documented code with its exit status (the
    envelope on stderr for 1, stdout for 2), never internal_error, never a traceback."""
    out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    if "Traceback" in err:
        return f"traceback: {err[-400:]}"
    status = proc.returncode
    calls = None
    if mock is not None and example.server_id is not None:
        calls = [e for e in mock.received(example.server_id) if e.get("rpc_method") == "tools/call"]
    if status == 0:
        if example.target != "jq":
            try:
                envelope = json.loads(out)
            except ValueError:
                return f"exit 0 without one JSON envelope on stdout: {out[:200]!r}"
            if envelope.get("ok") is not True:
                return f"exit 0 with {out[:200]!r}"
        if calls is not None and len(calls) != 1:
            return f"exit 0 but the server received {len(calls)} tools/call"
        return None
    if status not in (1, 2):
        return f"exit status {status}: {err[-300:]!r}"
    stream = err if status == 1 else out
    if status == 1 and out:
        return f"exit 1 with output on stdout: {out[:200]!r}"
    lines = stream.strip().splitlines()
    try:
        envelope = json.loads(lines[-1])
        code = envelope["error"]["code"]
    except (IndexError, ValueError, KeyError, TypeError):
        return f"exit {status} without an error envelope: {stream[-300:]!r}"
    if code == "internal_error":
        return f"internal_error: {envelope['error'].get('message')}"
    if code not in DOCUMENTED or status not in DOCUMENTED[code]:
        return f"code {code!r} with exit {status} is not documented in docs/errors.md"
    if code not in example.allowed:
        return f"code {code!r} is not an answer this target may give ({sorted(example.allowed)}): {lines[-1][:300]}"
    if calls is not None and calls:
        return f"rejected locally ({code}) but the server received {len(calls)} tools/call"
    return None


def run_examples(jobs: list[tuple[list[str], dict[str, str], Example]], mock: RelayedMock | None) -> list[str]:
    """Run every (entry, environment, example) as its own process, a small pool at a time; the failures, each
    with the command that replays it."""

    def one(job: tuple[list[str], dict[str, str], Example]) -> str | None:
        entry, env, example = job
        run_env = dict(env, FUZZ_ID=example.server_id or "none")
        cmd = [*entry, *example.args]
        try:
            # cwd: a private folder (with -m, the working directory comes first on sys.path)
            proc = subprocess.run(
                cmd, input=example.stdin, capture_output=True, env=run_env, cwd=env["HOME"], timeout=SAFETY, check=False
            )
        except subprocess.TimeoutExpired:
            problem: str | None = f"did not end within {SAFETY}s (killed)"
        else:
            problem = judge(example, proc, mock)
        if problem is None:
            return None
        stdin = f" < stdin {example.stdin[:80]!r}" if example.stdin else ""
        pythonpath = f"PYTHONPATH={env['PYTHONPATH']} " if "PYTHONPATH" in env else ""
        return f"[{example.target}] {problem}\n    replay: (cd {env['HOME']}; {pythonpath}{shown(cmd)}{stdin})"

    for _, _, example in jobs:  # once, before any process runs (a typo runs through both entries)
        for path, data in example.files.items():
            Path(path).write_bytes(data)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return [p for p in pool.map(one, jobs) if p is not None]
