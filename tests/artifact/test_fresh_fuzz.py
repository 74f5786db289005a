"""Issue 11 item 2: bad input where users meet it, through the real entry point in a fresh interpreter.

Four targets (the config file; --body inline, @FILE and stdin; tool-flag values against the mock server over
stdio; --jq), each on every CPython 3.9-3.14 found (artifact_helpers.find_python: pyenv, else a native launcher
of BKMCP_FOREIGN_PYTHONS), half of the examples through the source tree (`python -S -m bkmcp`) and half through
the built pyz (`python -S bkmcp.pyz`). Every answer must be exit 0 or a code of docs/errors.md with its exit
status, never internal_error or a traceback; a flag value rejected locally must never reach the server, and an
accepted one reaches it exactly once.

Counts (fresh_fuzz.py): BKMCP_FRESH_FUZZ_EXAMPLES per target on the build Python (the one running pytest, which
also built the pyz; CI: 2000), BKMCP_FRESH_FUZZ_EXAMPLES_OTHER per target on each other Python (CI: 200); the
classic typos of each target always run, through both entries.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import fresh_fuzz
import pytest
from artifact_helpers import PY_VERSIONS, find_python, program_source

from tests.helpers import JSON_SYNTAX_TYPOS, write_mcp_json

BUILD_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
TARGETS = sorted(fresh_fuzz.GENERATORS)


@pytest.fixture(scope="session")
def relayed_mock():
    mock = fresh_fuzz.RelayedMock()
    yield mock
    mock.close()


@pytest.fixture(scope="session")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bkmcp.py alone in a folder, compiled by each Python on first use (`-m` runs the cached bytecode, as an
    installed module would; a script path would be compiled again at every start)."""
    folder = tmp_path_factory.mktemp("fresh-src")
    shutil.copy2(program_source(), folder / "bkmcp.py")  # BKMCP_SOURCE: the same program as the pyz
    return folder


def _prepare(python: str, source: Path) -> None:
    check = subprocess.run(
        [
            python,
            "-S",
            "-c",
            "import sys, py_compile; py_compile.compile(sys.argv[1], doraise=True); print('json' in sys.modules)",
            str(source / "bkmcp.py"),
        ],
        capture_output=True,
        text=True,
        timeout=fresh_fuzz.SAFETY,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "False", f"{python} -S preloads json: a fresh-interpreter fuzz would prove nothing"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("version", PY_VERSIONS)
def test_fresh_interpreter_fuzz(version, target, pyz_path, source_copy, relayed_mock, tmp_path):
    python = find_python(version)
    if python is None:
        pytest.skip(f"CPython {version} is not installed here (pyenv versions, BKMCP_FOREIGN_PYTHONS)")
    _prepare(python, source_copy)
    count = fresh_fuzz.EXAMPLES_BUILD if version == BUILD_VERSION else fresh_fuzz.EXAMPLES_OTHER
    work = tmp_path / "work"
    home, cache, tmp = tmp_path / "home", tmp_path / "cache", tmp_path / "tmp"
    for folder in (work, home, cache, tmp):
        folder.mkdir()
    good = write_mcp_json(tmp_path / "good.json", {"srv": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    flags = tmp_path / "flags.json"
    flags.write_text(json.dumps(relayed_mock.config(sys.executable)))
    base = {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(cache),
        "TMPDIR": str(tmp),
        "PATH": os.environ["PATH"],
        "FUZZ_TOKEN": "tok-fuzz-123456",
        "FUZZ_DIR": "/data",
    }
    rng = random.Random(f"{fresh_fuzz.SEED}-{version}-{target}")
    examples = fresh_fuzz.GENERATORS[target](rng, count, work, str(flags if target == "flags" else good))
    entries = [
        ([python, "-S", "-m", "bkmcp"], dict(base, PYTHONPATH=str(source_copy))),
        ([python, "-S", str(pyz_path)], base),
    ]
    # the classic typos (first in the list) through both entries, then the rest alternating
    typos = {
        "config": len(fresh_fuzz.CONFIG_TYPOS),
        "body": 3 * len(fresh_fuzz.BODY_TYPOS),
        "jq": len(fresh_fuzz.JQ_TYPOS),
        "flags": len(fresh_fuzz.FLAG_TYPOS),
    }[target]
    jobs = [(entry, env, example) for example in examples[:typos] for entry, env in entries]
    jobs += [(*entries[i % 2], example) for i, example in enumerate(examples[typos:])]
    failures = fresh_fuzz.run_examples(jobs, relayed_mock if target == "flags" else None)
    assert not failures, f"{len(failures)} of {len(jobs)} examples broke the contract:\n" + "\n".join(failures[:8])


_EQUAL = r"""
import sys
sys.path.insert(0, sys.argv[1])
import bkmcp
assert "json" not in sys.modules, "json preloaded"
text = sys.argv[2].encode("utf-8", "surrogateescape").decode("utf-8", "surrogatepass")
def outcome(parse):
    try:
        value = parse(text)
    except bkmcp.JsonInputError as exc:
        return "error %s | %s %s" % (exc, exc.line, exc.column)
    assert parse is bkmcp.parse_json_plain or "json" not in sys.modules, "the fast path imported json"
    return "ok " + bkmcp.dump_json(value)
print(outcome(bkmcp.parse_json))  # first: json not imported yet
print(outcome(bkmcp.parse_json_plain))
"""
EQUAL_TEXTS = [
    *JSON_SYNTAX_TYPOS,
    "{} x",
    "",
    '{"a": NaN}',
    '{"a": 1, "a": 2}',
    "[" * 3000,
    '{"a": "\\ud800"}',
    '{"a": "\x01"}',
    '{"a": [1e400, -0, 0.1]}',
    "\u00a0",
]


@pytest.mark.parametrize("version", PY_VERSIONS)
def test_parse_json_equals_the_json_module_in_fresh_interpreters(version, source_copy):
    """Issue 11 item 1: the fast path (C scanner, json not imported) answers exactly what the json module answers,
    errors and positions included, on every Python; each text in its own fresh interpreter."""
    python = find_python(version)
    if python is None:
        pytest.skip(f"CPython {version} is not installed here (pyenv versions, BKMCP_FOREIGN_PYTHONS)")
    _prepare(python, source_copy)
    for text in EQUAL_TEXTS:
        proc = subprocess.run(
            [python, "-S", "-c", _EQUAL, str(source_copy), text],
            capture_output=True,
            text=True,
            timeout=fresh_fuzz.SAFETY,
            check=False,
            env={"PATH": os.environ["PATH"]},
        )
        assert proc.returncode == 0, f"{text[:40]!r}: {proc.stderr[-500:]}"
        fast, plain = proc.stdout.splitlines()
        assert fast == plain, f"{text[:40]!r} on {version}"
        if text in EQUAL_TEXTS[:7]:  # the syntax typos: invalid_mcp_config / invalid_mcp_arguments with a position
            assert fast.startswith("error ") and " at line 1 column " in fast, fast
