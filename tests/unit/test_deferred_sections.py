"""The pyz's deferred sections (zipapp_support.defer_sections, docs/building.md): bkmcp.py's engine and resident
sections are executed on first use. The loaded module must be the plain import, name by name; the help paths
must not load them; and the build must refuse every source it cannot defer exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import zipapp_support  # noqa: E402
from tests.helpers import write_mcp_json  # noqa: E402

BANNER = "# " + "=" * 60


# the synthetic sections below observe when a deferred section runs through calls the real build refuses
OBSERVING = zipapp_support.DEFERRABLE_CALLS | {"RUNS.append", "helper", "flaky", "time.sleep"}


def synthetic_source(sections: dict[int, str], deferred: tuple[int, ...] = (2,)) -> bytes:
    """Numbered sections (banners as in bkmcp.py), those in `deferred` marked as deferred in the pyz."""
    parts = ["from __future__ import annotations\n"]
    for number, body in sections.items():
        mark = f" {zipapp_support.DEFERRED_MARK}" if number in deferred else ""
        parts.append(f"{BANNER}\n# {number}. Section {number}{mark}\n{BANNER}\n{textwrap.dedent(body)}\n")
    return "".join(parts).encode()


def synthetic(
    sections: dict[int, str], deferred: tuple[int, ...] = (2,), allowed: frozenset[str] = OBSERVING
) -> types.ModuleType:
    """A module made of numbered sections, compiled as the pyz compiles bkmcp.py (`deferred` marked)."""
    source = synthetic_source(sections, deferred)
    import ast

    tree = zipapp_support.defer_sections(ast.parse(source), source, "synthetic.py", allowed)
    module = types.ModuleType("synthetic")
    exec(compile(tree, "synthetic.py", "exec", dont_inherit=True), module.__dict__)
    return module


def test_a_deferred_section_runs_on_first_use_by_a_function_or_an_attribute() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\ndef early():\n    return 'no deferred name'\n",
            2: "_ = RUNS.append('2')\nclass Engine:\n    pass\ndef start():\n    return Engine()\n",
            3: "def go():\n    return start()\n",
        }
    )
    assert mod.RUNS == [] and "Engine" not in vars(mod)
    assert mod.early() == "no deferred name" and mod.RUNS == []  # names nothing deferred: no load
    assert isinstance(mod.go(), mod.Engine)  # main names `start`: its guard loaded section 2
    assert mod.RUNS == ["2"] and mod.Engine.__module__ == "synthetic"
    mod.go()
    assert mod.RUNS == ["2"]  # once

    other = synthetic({1: "RUNS = []\n", 2: "_ = RUNS.append('2')\nVALUE = 7\n"})
    assert other.VALUE == 7 and other.RUNS == ["2"]  # module attribute (PEP 562 __getattr__)
    with pytest.raises(AttributeError, match=r"^module 'synthetic' has no attribute 'nope'$"):
        other.nope  # noqa: B018


def test_later_units_load_the_earlier_ones_first_in_source_order() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\n",
            2: "_a = RUNS.append(2)\nA = 1\n",
            3: "def kept():\n    return 'between the two'\n",
            4: "_b = RUNS.append(4)\nB = A + 1\n",
            5: "def go():\n    return B\n",
        },
        deferred=(2, 4),
    )
    assert mod.go() == 2 and mod.RUNS == [2, 4]
    assert mod._bkmcp_lazy_1 is False and mod._bkmcp_lazy_2 is False


def test_concurrent_first_use_loads_once_and_every_thread_sees_the_names() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\n",
            2: "import time\n_slow = time.sleep(0.05)\n_r = RUNS.append(1)\nREADY = 'ready'\n",
            3: "def go():\n    return READY\n",
        }
    )
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(mod.go())) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == ["ready"] * 16 and mod.RUNS == [1]


def test_a_deferred_section_calling_back_into_the_module_does_not_recurse() -> None:
    mod = synthetic(
        {
            1: "def helper():\n    return BASE * 2\n",
            2: "BASE = 21\nDOUBLE = helper()\n",
            3: "def go():\n    return DOUBLE\n",
        }
    )
    assert mod.go() == 42


def test_a_failed_load_is_retried_whole() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\ndef flaky():\n    RUNS.append(1)\n    if len(RUNS) == 1:\n"
            "        raise OSError('first time')\n    return 'ok'\n",
            2: "STATE = flaky()\n",
            3: "def go():\n    return STATE\n",
        }
    )
    with pytest.raises(OSError, match="first time"):
        mod.go()
    assert mod._bkmcp_lazy_1 is True
    assert mod.go() == "ok" and mod.RUNS == [1, 1]


@pytest.mark.parametrize(
    "sections, why",
    [
        ({2: "class Base:\n    pass\n", 3: "class Child(Base):\n    pass\n"}, "while the class is created"),
        ({2: "def deco(f):\n    return f\n", 3: "@deco\ndef f():\n    pass\n"}, "decorator or default"),
        ({2: "X = 1\n", 3: "def f(x=X):\n    return x\n"}, "decorator or default"),
        ({2: "X = 1\n", 3: "class C:\n    y = X\n"}, "while the class is created"),
        ({2: "X = 1\n", 3: "Y = X + 1\n"}, "at import"),
        ({2: "X = 1\n", 3: "F = lambda: X\n"}, "module-level lambda"),
        ({2: "X = 1\n", 3: "if X:\n    pass\n"}, "at import"),
        ({2: "X = 1\n", 3: "X = 2\n"}, "bound both"),
        ({2: "X = 1\nX = 2\n"}, "bound in two deferred places"),
        ({1: "STATE = {}\n", 2: "STATE['k'] = 1\n"}, "may only define names"),
        ({1: "STATE = []\n", 2: "STATE.append(1)\n"}, "may only define names"),
        ({2: "for i in range(3):\n    pass\n"}, "may only define names"),
        ({2: "_bkmcp_mine = 1\n"}, "reserved"),
        ({2: "X = 1\n", 3: "def __getattr__(name):\n    return X\n"}, "__getattr__"),
    ],
)
def test_the_build_refuses_what_it_cannot_defer_exactly(sections: dict[int, str], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        synthetic(sections)


def test_the_build_refuses_a_missing_future_import() -> None:
    import ast

    source = f"{BANNER}\n# 1. One {zipapp_support.DEFERRED_MARK}\n{BANNER}\nX = 1\n".encode()
    with pytest.raises(ValueError, match="from __future__ import annotations"):
        zipapp_support.defer_sections(ast.parse(source), source, "s.py")


def test_the_banner_mark_decides_what_is_deferred() -> None:
    """Issue 18 item 7: what the pyz defers is marked on the banner where people edit, and the build reads only
    that: consecutive marked sections form one unit; a banner that mentions deferring without the exact mark is
    refused rather than silently kept."""
    source = synthetic_source({1: "A = 1\n", 2: "B = 2\n", 3: "C = 3\n", 4: "D = 4\n", 5: "E = 5\n"}, (2, 3, 5))
    assert zipapp_support.deferred_units(source) == ((2, 3), (5,))
    mod = synthetic({1: "A = 1\n", 2: "B = 2\n", 3: "C = 3\n", 4: "D = 4\n", 5: "E = 5\n"}, (2, 3, 5))
    assert "B" not in vars(mod) and "C" not in vars(mod) and "E" not in vars(mod) and mod.D == 4
    assert mod.C == 3 and mod._bkmcp_lazy_1 is False and mod._bkmcp_lazy_2 is True
    bkmcp_source = (ROOT / "bkmcp.py").read_bytes()
    assert zipapp_support.deferred_units(bkmcp_source) == ((5, 6, 7, 8), (10,))
    typo = f"{BANNER}\n# 2. Engine (deferred in the pyz)\n{BANNER}\nX = 1\n"
    with pytest.raises(ValueError, match="a deferred banner ends with"):
        zipapp_support.deferred_units(typo)


@pytest.mark.parametrize(
    "body",
    [
        "X = print('loaded')\n",
        "X = STATE.append(1)\n",
        "X = [STATE.pop() for _ in range(1)]\n",
        "@register\ndef f():\n    pass\n",
        "def f(x=make()):\n    return x\n",
        "class C:\n    y = make()\n",
        "class C(make()):\n    pass\n",
        "if make():\n    X = 1\n",
    ],
)
def test_the_build_refuses_a_deferred_statement_that_calls_something(body: str) -> None:
    """Issue 18 item 7: "deferred sections only define names" holds for what runs while they load, not only for
    the statement kinds: a call (in a value, a decorator, a default, a base class, a class body, a test) other
    than DEFERRABLE_CALLS could change state the rest of the module reads, later than a plain import would."""
    with pytest.raises(ValueError, match=r"may only define names, not call [\w.]+\(\)"):
        synthetic(
            {1: "STATE = []\ndef register(f):\n    return f\ndef make():\n    return object\n", 2: body},
            allowed=zipapp_support.DEFERRABLE_CALLS,
        )
    allowed = {
        "X = frozenset('ab'.split())\n",
        "@dataclass\nclass R:\n    a: int = 0\nR0 = R(1)\n",
        "class P:\n    @property\n    def v(self):\n        return print()\n",
    }
    for fine in allowed:
        synthetic({1: "def dataclass(cls):\n    return cls\n", 2: fine}, allowed=zipapp_support.DEFERRABLE_CALLS)


def test_the_build_refuses_a_guard_on_a_help_path() -> None:
    """Issue 18 item 7: a function `main` reaches before a def line marked REMOTE_MARK would load a deferred
    section on `--help`: the build names the path and what to move. Past the mark, guards are fine."""
    help_path = {
        1: "def render_help():\n    return 'usage: ' + str(ENGINE)\n",
        2: "ENGINE = 'engine'\n",
        3: "class Runner:\n    def run(self, remote):\n        return self.remote() if remote else render_help()\n"
        "    def remote(self):{mark}\n        return ENGINE\n"
        "def main(remote=False):\n    return Runner().run(remote)\n",
    }
    path = r"render_help is on a help path \(main -> Runner -> Runner.run -> render_help\)"
    with pytest.raises(ValueError, match=path):
        synthetic({**help_path, 3: help_path[3].format(mark="")})
    with pytest.raises(ValueError, match=r"Runner.remote is on a help path \(main -> Runner -> Runner.run"):
        synthetic({**help_path, 1: "def render_help():\n    return 'usage'\n", 3: help_path[3].format(mark="")})
    mod = synthetic(
        {
            **help_path,
            1: "def render_help():\n    return 'usage'\n",
            3: help_path[3].format(mark="  # pyz: remote part"),
        }
    )
    assert mod.main() == "usage" and mod._bkmcp_lazy_1 is True
    assert mod.main(remote=True) == "engine" and mod._bkmcp_lazy_1 is False


def test_zipapp_support_is_type_checked_and_the_rules_are_written_where_people_edit() -> None:
    """Issue 18 item 7: `make lint` type-checks zipapp_support.py like bkmcp.py; AGENTS.md and the section-11
    banner of bkmcp.py carry the placement rules, naming both marks."""
    lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    mypy = next(line for line in lint.splitlines() if "mypy" in line).split()
    assert {"bkmcp.py", "build_zipapp.py", "zipapp_support.py"} <= set(mypy)
    agents = (ROOT / "AGENTS.md").read_text()
    lines = (ROOT / "bkmcp.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# 11. CLI"))
    banner = "\n".join(line for line in lines[start + 2 : start + 40] if line.startswith("#"))
    for text in (agents, banner):
        assert zipapp_support.DEFERRED_MARK in text and zipapp_support.REMOTE_MARK in text
        assert "help path" in text


def test_annotations_and_locals_of_the_same_name_are_not_uses() -> None:
    mod = synthetic(
        {
            2: "class Engine:\n    pass\n",
            3: "class Record:\n    engine: Engine | None = None\ndef f(x):\n    y: Engine = x\n    return y\n",
        }
    )
    assert mod.Record.__annotations__ == {"engine": "Engine | None"} and mod.f(3) == 3
    assert mod._bkmcp_lazy_1 is True  # neither the class annotation nor the local annotation loaded section 2


_SUMMARY = r"""
import json, sys, types
sys.path.insert(0, {root!r})
if {lean}:
    import zipapp_support
    source = open({program!r}, 'rb').read()
    module = types.ModuleType('bkmcp')
    module.__file__ = {program!r}
    sys.modules['bkmcp'] = module
    exec(zipapp_support.lean_code(source, {program!r}), module.__dict__)
    before = sorted(vars(module))
    module._bkmcp_load(len(zipapp_support.deferred_units(source)))
else:
    import bkmcp as module
    before = []
def describe(value):
    kind = type(value).__name__
    code = getattr(value, '__code__', None) or getattr(getattr(value, '__init__', None), '__code__', None)
    line = code.co_firstlineno if code is not None and code.co_filename.endswith('bkmcp.py') else None
    simple = value if isinstance(value, (int, str, float, bool, type(None))) else (
        sorted(map(repr, value)) if isinstance(value, (tuple, frozenset)) else None)
    return [kind, getattr(value, '__qualname__', None), getattr(value, '__module__', None), line, simple]
skip = {{'__doc__', '__file__', '__cached__', '__loader__', '__spec__', '__builtins__', '__package__'}}
print(json.dumps({{'before': before,
                  'names': {{k: describe(v) for k, v in vars(module).items() if k not in skip}}}}, default=repr))
"""


def _summary(lean: bool) -> dict:
    code = _SUMMARY.format(root=str(ROOT), lean=lean, program=str(ROOT / "bkmcp.py"))
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same set order in both processes, for the reprs
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_bkmcp_loaded_from_its_lean_code_is_the_plain_import_name_by_name() -> None:
    """Fresh interpreters: bkmcp.py imported as it is, and compiled as the pyz compiles it, then fully loaded."""
    plain, lean = _summary(False)["names"], _summary(True)
    extra = set(lean["names"]) - set(plain)
    assert extra == {
        "__getattr__",
        "_bkmcp_load",
        *(
            f"_bkmcp_lazy_{k}"
            for k in range(1, len(zipapp_support.deferred_units((ROOT / "bkmcp.py").read_bytes())) + 1)
        ),
    }
    assert set(plain) <= set(lean["names"])
    for name, described in plain.items():
        assert lean["names"][name] == described, name
    # before the load, the deferred sections' names were absent: the engine and resident classes among them
    assert "McpSession" not in lean["before"] and "ResidentServer" not in lean["before"]
    assert "build_tool_flags" not in lean["before"]
    assert "main" in lean["before"] and "ToolToken" in lean["before"] and "render_root_help" in lean["before"]


def test_the_help_paths_load_no_deferred_section(tmp_path: Path) -> None:
    """``--help``, ``--version`` and ``<server> --help`` run without the engine; ``--dry-run`` loads the engine
    but not the resident mode; ``--registry ... --import`` loads the resident mode."""
    config = write_mcp_json(tmp_path, {"demo": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    code = textwrap.dedent(f"""
        import io, sys, types
        sys.path.insert(0, {str(ROOT)!r})
        import zipapp_support
        module = types.ModuleType('bkmcp'); sys.modules['bkmcp'] = module
        exec(zipapp_support.lean_code(open({str(ROOT / "bkmcp.py")!r}, 'rb').read(), 'bkmcp.py'), module.__dict__)
        def state():
            return [module._bkmcp_lazy_1, module._bkmcp_lazy_2]
        out = io.StringIO()
        for argv in (['--help'], ['--version'], ['--config', {str(config)!r}, 'demo', '--help'],
                     ['--config', {str(config)!r}, 'demo'], ['--config', {str(config)!r}, '--help'],
                     ['--config', {str(config)!r}, '--completion', 'servers'], ['--completion', 'zsh'],
                     ['--resident', '--registry', 'x.db', '--help']):
            assert module.main(argv, stdout=out, stderr=out) == 0, out.getvalue()
        print(state())
        dry = ['--config', {str(config)!r}, 'demo', 'echo', '--body', '{{}}', '--dry-run']
        assert module.main(dry, stdout=out, stderr=out) == 0, out.getvalue()
        print(state())
        listing = ['--registry', {str(tmp_path / "r.db")!r}, '--import', {str(config)!r}]
        assert module.main(listing, stdout=out, stderr=out) == 0, out.getvalue()
        print(state())
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["[True, True]", "[False, True]", "[False, False]"]
