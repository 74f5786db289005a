"""The vendored packages from the pyz's nested zip: each module's code is unmarshalled once, and every module has
the spec, file names, path and loader that a plain zipimport gives it (zipapp_support.VendoredSpecs,
docs/building.md "Fast start on every Python")."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from artifact_helpers import ROOT, TIMEOUT, build_pyz, program_source, run_in_pyz

# Run with the pyz's path and "pyz" (its own __main__, as `python bkmcp.pyz` runs it) or "plain" (bkmcp imported
# from the pyz, the vendor zip copy put first on sys.path by hand: zipimport alone). Loads what a remote command
# and a validated call load (httpx as bkmcp loads it, jsonschema with its meta-schemas, certifi's bundle), then
# prints, for every module from the vendor zip, its attributes and how often zipimport unmarshalled its code.
_PROBE = """
import collections, json, marshal, os, runpy, sys, zipfile
mode, pyz = sys.argv[1], sys.argv[2]
real, loads = marshal.loads, collections.Counter()
def counting(data, *rest):
    code = real(data, *rest)
    if sys._getframe(1).f_globals.get("__name__") == "zipimport":
        loads[code.co_filename] += 1
    return code
marshal.loads = counting
sys.path.insert(0, pyz)
if mode == "pyz":
    sys.argv = [pyz, "--version"]
    try:
        runpy.run_path(pyz, run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
    import bkmcp
else:
    import bkmcp, _bkmcp_boot
    build_id = json.loads(zipfile.ZipFile(pyz).read("BUILD-INFO.json"))["build_id"]
    sys.path.insert(0, os.path.join(_bkmcp_boot.zipapp_cache_dir(build_id), "_bkmcp_vendor.zip"))
bkmcp.import_httpx()
import certifi, jsonschema
jsonschema.Draft202012Validator({"type": "object"}).validate({})
certifi.where()
vendor = next(p for p in sys.path if p.endswith("_bkmcp_vendor.zip"))
facts = {}
for name, m in sorted(sys.modules.items()):
    if not (getattr(m, "__file__", None) or "").startswith(vendor + os.sep):
        continue
    s, loader = m.__spec__, m.__loader__
    entry = sys.modules[name.rpartition(".")[0]].__path__[0] if "." in name else vendor
    facts[name] = {
        "module": [m.__name__, m.__file__, m.__cached__, getattr(m, "__path__", None), m.__package__],
        "spec": [s.name, s.origin, s.cached, s.parent, s.has_location, s.submodule_search_locations, s.loader_state],
        "loader": [type(loader).__module__, type(loader).__name__, loader.archive, loader.prefix,
                   loader is s.loader, loader is sys.path_importer_cache.get(entry)],
        "dunders": sorted(k for k in vars(m) if k.startswith("__") and k.endswith("__")),
        "unmarshalled": loads["bkmcp.pyz/" + m.__file__[len(vendor) + 1 : -1]],
    }
class Inserting:  # does this import system see a finder inserted while it walks sys.meta_path? (3.14: a copy)
    def find_spec(self, name, path=None, target=None):
        if name == "_bkmcp_no_such_module":
            sys.meta_path.insert(sys.meta_path.index(self) + 1, Seen())
class Seen:
    def find_spec(self, name, path=None, target=None):
        seen.append(name)
seen = []
sys.meta_path.insert(0, Inserting())
try:
    import _bkmcp_no_such_module
except ImportError:
    pass
print(json.dumps({"vendor": vendor, "modules": facts, "live_meta_path": seen == ["_bkmcp_no_such_module"]}))
"""


def _probe(python: str, pyz: Path, mode: str, env: dict) -> dict:
    """`-S`: no site-packages, whose .pth files may import a vendored name (certifi, on this machine's 3.11)."""
    proc = subprocess.run(
        [python, "-S", "-c", _PROBE, mode, str(pyz)], env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_vendored_modules_are_unmarshalled_once_with_the_specs_of_plain_zipimport(
    python: str, tmp_path: Path, pyz_env: dict
) -> None:
    """Built by each Python in turn (the build Python's bytecode is the one the pyz carries, and zipimport differs
    from 3.9 to 3.14), the pyz loads every vendored module httpx, jsonschema and certifi need once, and each module
    equals a plain zipimport's: module attributes, spec, loader (the very zipimporter that `sys.path_importer_cache`
    holds for its folder). Where the import system walks a copy of `sys.meta_path` (3.14, gh-130094), the import
    that installs the finder does not see it: that one module is loaded as before."""
    pyz = build_pyz(tmp_path / "bkmcp.pyz", "--platform", "none", source=program_source(), python=python)
    ran = _probe(python, pyz, "pyz", pyz_env)
    plain = _probe(python, pyz, "plain", pyz_env)  # the same vendor zip copy: the first run made it
    assert ran["vendor"] == plain["vendor"]
    modules = ran["modules"]
    assert {"httpx", "httpcore", "h11", "idna", "certifi", "jsonschema", "attr", "pyrsistent"} <= set(modules)
    once = dict.fromkeys(modules, 1)
    if not ran["live_meta_path"]:  # the finder came too late for the import that put the vendor zip on sys.path
        once["httpcore"] = 2  # the first vendored name bkmcp.import_httpx imports; loaded as plain zipimport does
    assert {name: facts["unmarshalled"] for name, facts in modules.items()} == once
    for facts in (*modules.values(), *plain["modules"].values()):
        del facts["unmarshalled"]  # plain zipimport: twice (find_spec's get_filename, then exec_module)
    assert modules == plain["modules"]
    assert modules["httpx"]["spec"][1] == ran["vendor"] + "/httpx/__init__.pyc"
    assert modules["httpx"]["loader"][-2:] == [True, True]


def test_vendor_zip_has_unchecked_bytecode_beside_every_source(pyz_path: Path, build_info: dict) -> None:
    """What VendoredSpecs relies on: every module of the vendor zip has its `.pyc` beside its `.py` (zipimport
    takes it first), compiled by the build Python (the magic BUILD-INFO records), unchecked-hash (PEP 552) and
    hashed from that very source (so even `--check-hash-based-pycs always` accepts it)."""
    magic = bytes.fromhex(build_info["bytecode"]["magic"])
    assert magic == importlib.util.MAGIC_NUMBER  # the fixture's build Python is this one
    with zipfile.ZipFile(pyz_path) as outer:
        nested = zipfile.ZipFile(io.BytesIO(outer.read(build_info["vendor_zip"]["member"])))
    files = {name: nested.read(name) for name in nested.namelist()}
    sources = sorted(name for name in files if name.endswith(".py"))
    assert len(sources) > 100 and sorted(name[:-1] for name in files if name.endswith(".pyc")) == sources
    for name in sources:
        pyc = files[name + "c"]
        assert pyc[:4] == magic, name
        assert int.from_bytes(pyc[4:8], "little") == 0b01, name  # hash-based, check_source off
        assert pyc[8:16] == importlib.util.source_hash(files[name]), name


def test_vendored_specs_answer_only_where_the_path_finder_would_ask_the_vendor_zip_first(
    pyz_path: Path, pyz_env: dict, build_info: dict, tmp_path: Path
) -> None:
    """VendoredSpecs leaves everything else to PathFinder: an `idna` put before the vendor zip on sys.path wins as
    it would without the finder, a name the zip lacks is the usual ModuleNotFoundError, and the finder is not
    installed where it could not be exact (other bytecode magic, a relative vendor zip path)."""
    (tmp_path / "shadow" / "idna").mkdir(parents=True)
    (tmp_path / "shadow" / "idna" / "__init__.py").write_text("SHADOW = True\n")
    vendor = build_info["vendor_zip"]
    code = (
        "import importlib.machinery, importlib.util, os\n"
        "finders = lambda: [type(f).__name__ for f in sys.meta_path if type(f) is boot.VendoredSpecs]\n"
        f"args = {(build_info['build_id'], str(pyz_path), vendor['sha256'], tuple(vendor['top_level']))!r}\n"
        "boot.use_vendor_zip(*args, b'\\0\\0\\r\\n')\n"
        "print(finders())\n"
        "boot.VendoredSpecs.install(os.path.relpath(sys.path[0]), args[3], importlib.util.MAGIC_NUMBER)\n"
        "print(finders())\n"
        "sys.path.remove(sys.path[0])\n"
        "boot.use_vendor_zip(*args, importlib.util.MAGIC_NUMBER)\n"
        "before_path_finder = sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder) - 1]\n"
        "print(finders(), type(before_path_finder) is boot.VendoredSpecs)\n"
        f"sys.path.insert(0, {str(tmp_path / 'shadow')!r})\n"
        "import idna\n"
        "print(idna.SHADOW, idna.__file__)\n"
        "try:\n"
        "    import h11.no_such_module\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name)\n"
        "import h11\n"
        "spec = h11.__spec__\n"
        "print(spec.origin == sys.path[1] + '/h11/__init__.pyc', spec.loader is sys.path_importer_cache[sys.path[1]])\n"
    )
    proc = run_in_pyz(sys.executable, pyz_path, code, env=pyz_env, no_site=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[]",
        "[]",
        "['VendoredSpecs'] True",
        f"True {tmp_path / 'shadow' / 'idna' / '__init__.py'}",
        "h11.no_such_module",
        "True True",
    ]


# Runs the pyz's own __main__ (`--version`: nothing vendored loads), then loads what a remote command and a
# validated call load, counting the patterns re had to parse meanwhile; then compares every pattern of the pyz's
# regex table with what re's own compiler makes of it.
_REGEX_PROBE = """
import json, runpy, sys
pyz = sys.argv[1]
sys.path.insert(0, pyz)
sys.argv = [pyz, "--version"]
try:
    runpy.run_path(pyz, run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
import bkmcp, re, _bkmcp_boot as boot
parser = re._parser if hasattr(re, "_parser") else re.sre_parse
real_parse, parsed = parser.parse, []
def parse(pattern, *rest):
    parsed.append(repr(pattern))
    return real_parse(pattern, *rest)
parser.parse = parse
bkmcp.import_httpx()
import jsonschema
parser.parse = real_parse
compiler = re._compiler if hasattr(re, "_compiler") else re.sre_compile
plain = getattr(compiler.compile, "__wrapped__", compiler.compile)
differ = []
for (pattern, flags) in boot.REGEX_TABLE_USED:
    made, want = compiler.compile(pattern, flags), plain(pattern, flags)
    facts = lambda p: [type(p).__name__, p.pattern is pattern, p.flags, p.groups, dict(p.groupindex)]
    if made != want or facts(made) != facts(want):
        differ.append(repr(pattern))
print(json.dumps({"used": len(boot.REGEX_TABLE_USED), "parsed": parsed, "differ": differ}))
"""


def test_patterns_compiled_while_the_vendored_packages_load_come_from_the_build_pythons_table(
    python: str, pyz_path: Path, pyz_env: dict
) -> None:
    """On the build Python (same CPython release), every pattern httpx & co and jsonschema compile while they load
    is made from the pyz's regex table, not parsed, and each pattern of the table equals what re's own compiler
    makes (code, flags, groups, group names); on any other Python the table is not used."""
    pyz_env = dict(pyz_env, BKMCP_NO_COMPILED_CACHE="1")  # another Python then runs from the zip too
    command = [python, "-S", "-c", _REGEX_PROBE, str(pyz_path)]
    proc = subprocess.run(command, env=pyz_env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(proc.stdout.splitlines()[-1])
    same_release = subprocess.run(
        [python, "-c", "import sys; print(sys.hexversion)"], capture_output=True, text=True, check=True
    ).stdout.strip() == str(sys.hexversion)  # the session's pyz is built by this interpreter
    if same_release:
        assert ran["used"] > 80 and ran["parsed"] == [] and ran["differ"] == []
    else:
        assert ran["used"] == 0 and ran["parsed"]


_TABLE_CHECK = """
import marshal, re, warnings
import zipapp_support as support
def load():
    re.compile(r"(?P<key>[a-z]+)=(?P<value>\\d*)", re.I)
    re.compile(rb"[\\x80-\\xff]+")
    re.compile("x", re.DEBUG)
    warnings.simplefilter("ignore")
    re.compile("[[a]")  # FutureWarning: possible nested set
data = support.record_regexes(load)
key, table = marshal.loads(data)
print(list(table) == [(rb"[\\x80-\\xff]+", 0), (r"(?P<key>[a-z]+)=(?P<value>\\d*)", re.I.value)])
other_release = marshal.dumps((key[:1] + (key[1] + 1,) + key[2:], table))
print(support.use_regex_table(other_release), support.REGEX_TABLE_USED == {})
print(support.use_regex_table(data), support.use_regex_table(data))
re.purge()  # re's cache holds what load() compiled
made = re._compile(r"(?P<key>[a-z]+)=(?P<value>\\d*)", re.I)
plain = support._regex_compiler().compile.__wrapped__(r"(?P<key>[a-z]+)=(?P<value>\\d*)", re.I.value)
print(made == plain, made.groupindex == plain.groupindex, made.flags == plain.flags, made.match("A=12").groups())
"""


def test_the_regex_table_keeps_what_compiled_quietly_and_serves_only_its_own_release() -> None:
    """record_regexes leaves out a pattern that warned or asked for DEBUG; a table of another CPython release is
    refused; a table is installed once; a pattern made from it equals the one re's compiler makes."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _TABLE_CHECK], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-4:] == [  # before them: re.DEBUG's output
        "True",
        "False True",
        "True False",
        "True True True ('A', '12')",
    ]


_LATER_RE = """
import _sre, re
import zipapp_support as support
compiler, real_sre_compile, seen, calls = support._regex_compiler(), _sre.compile, [], []
class Seeing:
    def __getattr__(self, name):
        return getattr(_sre, name)
    @staticmethod
    def compile(*args):
        seen.append(args)
        return real_sre_compile(*args)
compiler._sre = Seeing()
re.compile("later-re")
compiler._sre = _sre
re.purge()
def later_sre_compile(pattern, flags, code, groups, groupindex, indexgroup, repeats):
    calls.append((pattern, repeats))
    return real_sre_compile(pattern, flags, code, groups, groupindex, indexgroup)
def later_compile(pattern, flags=0):  # re's compiler as a later CPython's may be: one more integer for _sre
    return compiler._sre.compile(*seen[0], 7)
compiler.compile, _sre.compile = later_compile, later_sre_compile
data = support.record_regexes(lambda: re.compile("later-re"))
print(support.use_regex_table(data), calls)
re.purge()
print(re.compile("later-re").match("later-re") is not None, calls[-1], len(calls))
"""


def test_the_regex_table_carries_what_a_later_re_passes_after_the_group_names() -> None:
    """A CPython whose re compiler gives `_sre.compile` more integers after the group names gets them back from the
    table: a pattern is recorded and made from the table with every argument its compiler gave."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _LATER_RE], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True [('later-re', 7)]", "True ('later-re', 7) 2"]
