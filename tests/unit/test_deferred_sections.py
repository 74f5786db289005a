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


def synthetic(sections: dict[int, str], units=((2,),)) -> types.ModuleType:
    """A module made of numbered sections (banners as in bkmcp.py), compiled with `units` deferred."""
    parts = ["from __future__ import annotations\n"]
    for number, body in sections.items():
        parts.append(f"{BANNER}\n# {number}. Section {number}\n{BANNER}\n{textwrap.dedent(body)}\n")
    source = "".join(parts).encode()
    import ast

    tree = zipapp_support.defer_sections(ast.parse(source), source, "synthetic.py", units)
    module = types.ModuleType("synthetic")
    exec(compile(tree, "synthetic.py", "exec", dont_inherit=True), module.__dict__)
    return module


def test_a_deferred_section_runs_on_first_use_by_a_function_or_an_attribute() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\ndef early():\n    return 'no deferred name'\n",
            2: "_ = RUNS.append('2')\nclass Engine:\n    pass\ndef start():\n    return Engine()\n",
            3: "def main():\n    return start()\n",
        }
    )
    assert mod.RUNS == [] and "Engine" not in vars(mod)
    assert mod.early() == "no deferred name" and mod.RUNS == []  # names nothing deferred: no load
    assert isinstance(mod.main(), mod.Engine)  # main names `start`: its guard loaded section 2
    assert mod.RUNS == ["2"] and mod.Engine.__module__ == "synthetic"
    mod.main()
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
            3: "_b = RUNS.append(3)\nB = A + 1\n",
            4: "def main():\n    return B\n",
        },
        units=((2,), (3,)),
    )
    assert mod.main() == 2 and mod.RUNS == [2, 3]
    assert mod._bkmcp_lazy_1 is False and mod._bkmcp_lazy_2 is False


def test_concurrent_first_use_loads_once_and_every_thread_sees_the_names() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\n",
            2: "_slow = __import__('time').sleep(0.05)\n_r = RUNS.append(1)\nREADY = 'ready'\n",
            3: "def main():\n    return READY\n",
        }
    )
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(mod.main())) for _ in range(16)]
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
            3: "def main():\n    return DOUBLE\n",
        }
    )
    assert mod.main() == 42


def test_a_failed_load_is_retried_whole() -> None:
    mod = synthetic(
        {
            1: "RUNS = []\ndef flaky():\n    RUNS.append(1)\n    if len(RUNS) == 1:\n"
            "        raise OSError('first time')\n    return 'ok'\n",
            2: "STATE = flaky()\n",
            3: "def main():\n    return STATE\n",
        }
    )
    with pytest.raises(OSError, match="first time"):
        mod.main()
    assert mod._bkmcp_lazy_1 is True
    assert mod.main() == "ok" and mod.RUNS == [1, 1]


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


def test_the_build_refuses_a_missing_banner_and_a_missing_future_import() -> None:
    with pytest.raises(ValueError, match="no banner for deferred section"):
        synthetic({1: "X = 1\n"}, units=((4,),))
    import ast

    source = f"{BANNER}\n# 1. One\n{BANNER}\nX = 1\n".encode()
    with pytest.raises(ValueError, match="from __future__ import annotations"):
        zipapp_support.defer_sections(ast.parse(source), source, "s.py", ((1,),))


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
    module._bkmcp_load(len(zipapp_support.DEFERRED_SECTIONS))
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
        *(f"_bkmcp_lazy_{k}" for k in range(1, len(zipapp_support.DEFERRED_SECTIONS) + 1)),
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
                     ['--config', {str(config)!r}, 'demo']):
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
