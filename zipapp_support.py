"""Runtime support for running bkmcp from the single-file artifact `bkmcp.pyz` (see docs/building.md).

Stdlib only, Python 3.9+, self-contained. `build_zipapp.py` stores this file in the pyz as `_bkmcp_boot.py`.

* Fast start: the pyz `__main__.py` calls `use_compiled_cache(build_id, archive)` on a Python other than the one
  that built the pyz (the pyz carries bytecode for the build Python only, and zipimport never caches bytecode),
  so that Python's later runs import from a per-user copy with ordinary `__pycache__` files.
* Natives: bkmcp.py's `_load_jq_module()` calls `_bkmcp_boot.load_native_module("jq")` (importable only inside
  the pyz), which extracts the jq binding built for this interpreter into the per-user cache and imports it.
  The "cache folders" section plus `load_native_module` and its helpers can instead be pasted into bkmcp.py.

It runs no jq itself: bkmcp.py's `JqProgram` is the one `--jq` implementation (binding,
else a `jq` executable, else `jq_unavailable`), and tests/artifact exercise it through the pyz's CLI.

Cache layout: `${XDG_CACHE_HOME:-~/.cache}/bkmcp/<build-id>/{py,native}/`; when that is not writable (read-only
home), `<tmpdir>/bkmcp-<uid>/<build-id>/`, and when even that is unusable, a fresh private temp dir per run.
Writers never expose partial files: a folder is filled under a temporary name and renamed into place, a native
module is written to a temporary file, checked against its sha256 and renamed, so concurrent first runs are safe
without locks. Deleting the cache is always safe.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# ---------------------------------------------------------------------------------------------- cache folders


def _private_dir(path: str) -> bool:
    """Create `path` (mode 0700) if needed; True when it is a directory we own that nobody else can write."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_mode & 0o022:
        return False
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return False
    return os.access(path, os.W_OK | os.X_OK)


def zipapp_cache_dir(build_id: str) -> str | None:
    """The per-user folder of this build: XDG cache, else `<tmp>/bkmcp-<uid>`, else a fresh temp dir (or None)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(base, "bkmcp")
    if _private_dir(root) and _private_dir(os.path.join(root, build_id)):
        return os.path.join(root, build_id)
    import tempfile  # only here: it imports random, whose start-up costs more than all of bkmcp --help

    uid = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    root = os.path.join(tempfile.gettempdir(), f"bkmcp-{uid}")
    if _private_dir(root) and _private_dir(os.path.join(root, build_id)):
        return os.path.join(root, build_id)
    try:  # last resort: private to this run (mkdtemp is 0700), not reused
        return tempfile.mkdtemp(prefix=f"bkmcp-{build_id}-")
    except OSError:
        return None


def _zipapp_archive() -> str | None:
    """Path of the pyz this code runs from (set by the pyz boot, or this module's zip, or `__main__`), else None."""
    boot = sys.modules.get("_bkmcp_boot")
    if getattr(boot, "ARCHIVE", None):
        return str(boot.ARCHIVE)  # type: ignore[union-attr]
    archive = getattr(globals().get("__loader__"), "archive", None)
    if archive:
        return str(archive)
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    candidate = os.path.dirname(main_file)
    if candidate and os.path.isfile(candidate) and os.path.basename(main_file).startswith("__main__."):
        return candidate
    return None


def _zipapp_read(archive: str, name: str) -> bytes:
    """One member of the archive, through zipimport's cached directory (no zipfile import)."""
    import zipimport

    return zipimport.zipimporter(archive).get_data(name)


# ------------------------------------------------------------------------------------- fast start (pyz boot)

ARCHIVE: str | None = None


def use_compiled_cache(build_id: str, archive: str) -> bool:
    """Put a per-user copy of the pyz's Python files first on sys.path, with bytecode written on first import.

    Called by the pyz `__main__.py` on a Python whose bytecode the pyz does not carry (that `__main__` already
    put the copy on sys.path when it sits in its usual place). The first run extracts the `.py` files (tens of
    ms); every import then behaves as from site-packages: `__pycache__/*.pyc` is written once (even under
    PYTHONDONTWRITEBYTECODE, for this folder only) and reused. Any failure leaves sys.path alone, so the program
    runs from the zip, only slower. Returns True when the copy is in use.
    """
    global ARCHIVE
    ARCHIVE = archive
    if os.environ.get("BKMCP_NO_COMPILED_CACHE"):
        return False
    try:
        root = zipapp_cache_dir(build_id)
        if root is None:
            return False
        tree = os.path.join(root, "py")
        if not os.path.isdir(tree) and not _extract_tree(archive, root, tree):
            return False
        _install_writing_finder(tree)
        boot = os.path.join(tree, "_bkmcp_boot.py")  # imported before the writing finder exists: compile it now
        import importlib.util

        if not os.path.exists(importlib.util.cache_from_source(boot)):
            import py_compile

            py_compile.compile(boot)
    except Exception:  # never let an optimisation stop the program
        return False
    return True


def _pure_members(archive: str):  # type: ignore[no-untyped-def]
    """(name, bytes) of every pure member of the pyz and of its nested vendor zip: no natives, no legacy .pyc."""
    import io
    import zipfile

    with zipfile.ZipFile(archive) as outer:
        nested = [outer.read(VENDOR_ZIP)] if VENDOR_ZIP in outer.namelist() else []
        for zf in [outer] + [zipfile.ZipFile(io.BytesIO(data)) for data in nested]:
            for info in zf.infolist():
                name = info.filename
                skip = name.endswith(("/", ".pyc")) or name.startswith(("_bkmcp_native/", "__main__"))
                if skip or name == VENDOR_ZIP:
                    continue
                yield name, zf.read(info)


def _extract_tree(archive: str, root: str, tree: str) -> bool:
    """Extract every pure member (see `_pure_members`) under a temp name, then rename it to `tree`."""
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix=".py-", dir=root)
    try:
        for name, data in _pure_members(archive):
            target = os.path.join(tmp, *name.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
        try:
            os.rename(tmp, tree)
        except OSError:  # another first run won the race: its copy is as good as ours
            if not os.path.isdir(tree):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        return True
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        return os.path.isdir(tree)


def lean_code(source: bytes, filename: str):  # type: ignore[no-untyped-def]
    """bkmcp.py compiled for the pyz: without docstrings and function annotations, and with its engine and
    resident sections deferred (see `defer_sections`).

    Docstrings and function annotations are read by nothing at run time (class annotations stay: the records
    are built from them; asserts stay, unlike ``-OO``); dropping them unmarshals ~11 % less bytecode. Line
    numbers are unchanged, so tracebacks still point at the right source lines. Used for the build Python's
    `.pyc` in the pyz and for the compiled cache. The ``from __future__ import annotations`` stays: without it,
    CPython 3.14 keeps class annotations lazily (PEP 649) instead of in the class ``__dict__`` where section 2's
    ``dataclass`` reads them."""
    import ast

    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None:
                    arg.annotation = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.copy_location(ast.Pass(), first)]
    return compile(defer_sections(tree, source, filename), filename, "exec", dont_inherit=True)


# -------------------------------------------------------------------------------------------- deferred sections
# `bkmcp --help` must start within 2x of a bare interpreter, but bkmcp.py also holds the session engine, the
# schema flags and the resident mode, which no help path runs: unmarshalling and executing them would be a third
# of every start. The pyz therefore carries those sections as marshalled code, executed into the module's own
# globals on first use. Which sections: those whose banner title ends with DEFERRED_MARK (the build reads the
# banners, so the mark is where people edit); consecutive marked sections form one unit, loaded together. Nothing
# is rewritten but two things, both proven safe here rather than assumed:
#   * every function of the other sections that names something a deferred section defines starts with
#     ``if _bkmcp_lazy_N: _bkmcp_load(N)`` (cheap once loaded: one global lookup);
#   * the module gets a ``__getattr__`` (PEP 562) that loads the section defining a missing attribute.
# The build refuses (ValueError, with the line and what to move) what this cannot make exact or would make slow:
#   * a deferred name used while the module is executed (a base class, a decorator, a default value, a class
#     attribute, a module-level lambda), and a name bound both in a deferred section and elsewhere;
#   * a deferred statement that does more than define names: only definitions, imports and assignments to plain
#     names, and nothing called while they run (values, decorators, default values, base classes, class bodies)
#     but DEFERRABLE_CALLS and the section-2 dataclasses the deferred sections define (a call could change state
#     the rest of the module reads, at a time that now depends on first use);
#   * a guard on a help path: a function `main` reaches without passing a function whose ``def`` line carries
#     REMOTE_MARK (that would load a deferred section on `--help`, losing what deferring saves).
# Unit N loads units 1..N-1 first, so sections always run in source order, as a plain import runs them.
# tests/unit/test_deferred_sections.py checks the loaded module against a plain import of bkmcp.py, name by name,
# that the help paths load no unit, and each refusal.

DEFERRED_MARK = "— deferred in the pyz"  # ends the title line of a deferred section's banner in bkmcp.py
REMOTE_MARK = "# pyz: remote part"  # on a def line of bkmcp.py: the help paths end here (it may load deferred code)
DEFERRABLE_CALLS = frozenset(  # what a deferred statement may call: each builds a value and touches nothing else
    "dataclass field frozenset tuple dict set list object range iter property staticmethod classmethod "
    "lazy_re _thread.allocate_lock".split()  # bkmcp.py section 2
)

_DEFERRED_SUPPORT = """
def _bkmcp_load(unit, _lock=__import__("_thread").RLock(), _loading=[], _codes=CODES, _gc=__import__("gc")):
    with _lock:
        scope = globals()
        for number, code in enumerate(_codes[:unit], 1):
            flag = "_bkmcp_lazy_%d" % number
            if scope[flag] and number not in _loading:
                _loading.append(number)
                collecting = _gc.isenabled()
                _gc.disable()
                try:
                    exec(__import__("marshal").loads(code), scope)
                finally:
                    _loading.remove(number)
                    if collecting:
                        _gc.enable()
                scope[flag] = False


def __getattr__(name, _units=dict(UNITS)):
    unit = _units.get(name)
    if unit is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _bkmcp_load(unit)
    return globals()[name]
"""


def _banners(source: bytes | str) -> list[tuple[int, int, str]]:
    """(first line, section number, title line) of each ``# ====`` / ``# N. Title`` / ``# ====`` banner."""
    lines = (source.decode("utf-8") if isinstance(source, bytes) else source).splitlines()
    found = []
    for i in range(len(lines) - 2):
        if lines[i].startswith("# ====") and lines[i + 2].startswith("# ===="):
            head = lines[i + 1][2:].split(".", 1)[0]
            if lines[i + 1].startswith("# ") and head.isdigit():
                found.append((i + 1, int(head), lines[i + 1].rstrip()))
    return found


def section_starts(source: bytes | str) -> list[tuple[int, int]]:
    """(first line, section number) of each ``# ====`` / ``# N. Title`` / ``# ====`` banner of bkmcp.py, in order
    (also what tests/unit/test_session_core.py's section rule reads)."""
    return [(line, number) for line, number, _ in _banners(source)]


def deferred_units(source: bytes | str, filename: str = "bkmcp.py") -> tuple[tuple[int, ...], ...]:
    """The sections the pyz defers, as units: runs of consecutive banners whose title ends with DEFERRED_MARK."""
    units: list[list[int]] = []
    previous_marked = False
    for line, number, title in _banners(source):
        marked = title.endswith(DEFERRED_MARK)
        if not marked and "deferred" in title.lower():
            raise ValueError(f"{filename} line {line}: a deferred banner ends with {DEFERRED_MARK!r}: {title!r}")
        if marked:
            if previous_marked:
                units[-1].append(number)
            else:
                units.append([number])
        previous_marked = marked
    return tuple(tuple(unit) for unit in units)


def section_of(starts: list[tuple[int, int]], line: int) -> int:
    """The number of the section holding `line` (0 above the first banner)."""
    return max((number for first, number in starts if first <= line), default=0)


def _loaded_names(node, skip_functions: bool):  # type: ignore[no-untyped-def]
    """Names used in `node`, read or bound (a local of a deferred name's name counts too: over-counting only costs a
    guard), annotations left out (never evaluated under ``from __future__ import annotations``); with
    `skip_functions`, only what runs when `node` itself runs: not function or lambda bodies."""
    import ast

    names, stack = set(), [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Name):
            names.add(item.id)
        elif isinstance(item, ast.AnnAssign):
            stack.extend(x for x in (item.target, item.value) if x is not None)
            continue
        elif isinstance(item, ast.arg):
            continue
        elif skip_functions and isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(item.args.defaults + [d for d in item.args.kw_defaults if d is not None])
            stack.extend(getattr(item, "decorator_list", []))
            continue
        stack.extend(ast.iter_child_nodes(item))
    return names


def _bound_names(statement):  # type: ignore[no-untyped-def]
    """Module-level names one statement binds (a definition, an assignment, an import, an ``if`` of those)."""
    import ast

    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
    if isinstance(statement, ast.If):
        return set().union(*(_bound_names(s) for s in statement.body + statement.orelse))
    names = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _callee(node: Any) -> str:
    """``a.b.c`` for a call of that dotted name, ``str.split`` for a method of a string constant, else ``?``."""
    import ast

    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return f"str.{node.attr}"
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else "?"


def _calls_run_now(statement: Any) -> list[tuple[int, str]]:
    """(line, callee) of every call made while `statement` runs: in values, decorators (each one is a call),
    default values, base classes and class bodies; not inside function or lambda bodies, which run later."""
    import ast

    calls: list[tuple[int, str]] = []
    stack = [statement]
    while stack:
        item = stack.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(item.args.defaults + [d for d in item.args.kw_defaults if d is not None])
            stack.extend(getattr(item, "decorator_list", []))
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            calls.extend((d.lineno, _callee(d)) for d in item.decorator_list if not isinstance(d, ast.Call))
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(item, ast.Call):
            calls.append((item.lineno, _callee(item.func)))
        stack.extend(ast.iter_child_nodes(item))
    return calls


def _plain_dataclasses(statements: list[Any]) -> set[str]:
    """Classes these statements define with ``@dataclass`` and no ``__init__``/``__post_init__`` of their own:
    calling one only stores its fields."""
    import ast

    found = set()
    for statement in statements:
        if isinstance(statement, ast.ClassDef) and any(
            _callee(d.func if isinstance(d, ast.Call) else d) == "dataclass" for d in statement.decorator_list
        ):
            methods = {s.name for s in statement.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if not methods & {"__init__", "__post_init__", "__new__"}:
                found.add(statement.name)
    return found


def _check_deferrable(statement: Any, where: str, allowed: frozenset[str]) -> None:
    """A deferred statement must only define: running it later cannot change what the rest of the module saw.
    Definitions, imports and assignments to plain names, calling nothing but `allowed` while they run."""
    import ast

    if isinstance(statement, ast.If):
        for inner in statement.body + statement.orelse:
            _check_deferrable(inner, where, allowed)
    elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        targets = (
            statement.targets
            if isinstance(statement, ast.Assign)
            else [statement.target]
            if isinstance(statement, ast.AnnAssign)
            else None
        )
        if targets is None or not all(
            isinstance(n, (ast.Name, ast.Tuple, ast.Store)) for t in targets for n in ast.walk(t)
        ):
            raise ValueError(
                f"{where} line {statement.lineno}: a deferred section may only define names, not run a "
                f"{type(statement).__name__}"
            )
    for line, callee in _calls_run_now(statement):
        if callee not in allowed and callee != "str.split" and not callee.endswith((".setter", ".getter", ".deleter")):
            raise ValueError(
                f"{where} line {line}: a deferred section may only define names, not call {callee}() while it "
                "runs (move the call into a function, or out of the deferred sections; zipapp_support."
                "DEFERRABLE_CALLS lists what may be called)"
            )


def _help_path_guards(
    kept: list[Any], guarded: dict[int, set[str]], lines: list[str], filename: str, entry: str = "main"
) -> None:
    """Refuse a guard on a help path: a function `entry` reaches (through names of functions, classes and their
    methods) without passing a ``def`` line that carries REMOTE_MARK. Over-approximates what a call can reach:
    ``x.name`` may be any method of that name of a class the path has named, ``self.name`` the class's own (or
    a base class's)."""
    import ast

    functions: dict[str, Any] = {}
    methods: dict[str, list[tuple[str, Any]]] = {}
    classes: set[str] = set()
    bases: dict[str, list[str]] = {}

    def index(body: list[Any], owner: str | None) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if REMOTE_MARK in lines[node.lineno - 1]:
                    continue  # the help paths end here
                if owner is None:
                    functions[node.name] = node
                else:
                    methods.setdefault(node.name, []).append((owner, node))
            elif isinstance(node, ast.ClassDef) and owner is None:
                classes.add(node.name)
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                index(node.body, node.name)
            elif isinstance(node, (ast.If, ast.Try)):
                index(node.body + node.orelse, owner)

    index(kept, None)
    if entry not in functions:
        return
    named_classes: set[str] = set()
    named_attributes: set[str] = set()
    seen: set[int] = set()
    queue: list[tuple[str, Any, tuple[str, ...]]] = [(entry, functions[entry], (entry,))]

    def reach(owner: str, name: str, path: tuple[str, ...]) -> None:
        for cls, node in methods.get(name, []):
            if cls == owner:
                queue.append((f"{cls}.{name}", node, (*path, f"{cls}.{name}")))

    while queue:
        qualname, node, path = queue.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in guarded:
            raise ValueError(
                f"{filename} line {node.lineno}: {qualname} is on a help path ({' -> '.join(path)}) but names "
                f"{sorted(guarded[id(node)])}, defined in a deferred section: `--help` would load it. Move that "
                "code into the deferred sections or behind a function whose def line says "
                f"{REMOTE_MARK!r}, or the help path's need out of it"
            )
        owner = qualname.split(".")[0] if "." in qualname else None
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                if sub.id in functions:
                    queue.append((sub.id, functions[sub.id], (*path, sub.id)))
                elif sub.id in classes and sub.id not in named_classes:
                    named_classes.add(sub.id)
                    for name in ("__init__", "__new__", "__post_init__", "__call__", "__enter__", "__exit__"):
                        reach(sub.id, name, (*path, sub.id))
                    for name in named_attributes:
                        reach(sub.id, name, (*path, sub.id))
            elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
                if owner is not None and isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                    for cls in (owner, *bases.get(owner, ())):  # its own method, or a base class's
                        reach(cls, sub.attr, path)
                    continue
                if sub.attr not in named_attributes:
                    named_attributes.add(sub.attr)
                for cls in named_classes:
                    reach(cls, sub.attr, path)


def defer_sections(tree: Any, source: bytes, filename: str, allowed_calls: frozenset[str] = DEFERRABLE_CALLS) -> Any:
    """`tree` (bkmcp.py's module) with the sections whose banners carry DEFERRED_MARK moved into marshalled code
    that the module executes on first use (see the comment above). Returns the new tree."""
    import __future__

    import ast
    import marshal

    starts = section_starts(source)
    units = deferred_units(source, filename)
    unit_of_section = {n: k for k, unit in enumerate(units, 1) for n in unit}
    kept, deferred = [], [[] for _ in units]  # type: ignore[var-annotated]
    for statement in tree.body:
        unit = unit_of_section.get(section_of(starts, statement.lineno))
        (kept if unit is None else deferred[unit - 1]).append(statement)
    futures = [s for s in kept if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    if not any(a.name == "annotations" for s in futures for a in s.names):
        raise ValueError(f"{filename}: deferring sections needs `from __future__ import annotations`")

    owner: dict[str, int] = {}  # deferred name -> its unit
    allowed = allowed_calls | _plain_dataclasses([s for statements in deferred for s in statements])
    for unit, statements in enumerate(deferred, 1):
        for statement in statements:
            _check_deferrable(statement, filename, allowed)
            for name in _bound_names(statement):
                if name in owner:
                    raise ValueError(f"{filename} line {statement.lineno}: {name!r} is bound in two deferred places")
                owner[name] = unit
    deferred_names = set(owner)
    for statement in kept:
        clash = _bound_names(statement) & (deferred_names | {"__getattr__"})
        if clash:
            raise ValueError(
                f"{filename} line {statement.lineno}: {sorted(clash)} bound both in a deferred section "
                "and outside it (or __getattr__ defined)"
            )
    if any(name.startswith("_bkmcp_") for name in deferred_names) or any(
        name.startswith("_bkmcp_") for s in kept for name in _bound_names(s)
    ):
        raise ValueError(f"{filename}: the _bkmcp_ prefix is reserved for the deferred-section loader")

    guarded: dict[int, set[str]] = {}  # id of a function given a guard -> the deferred names it uses

    def guard_functions(node: Any) -> None:
        """Refuse deferred names in code run at import; give each outermost function that names one its guard."""
        for child in (
            node.body
            + getattr(node, "orelse", [])
            + getattr(node, "finalbody", [])
            + [s for h in getattr(node, "handlers", []) for s in h.body]
        ):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                early = _loaded_names(child, skip_functions=True) & deferred_names
                if early:
                    raise ValueError(
                        f"{filename} line {child.lineno}: {sorted(early)} (deferred) used in a decorator "
                        "or default value"
                    )
                used = _loaded_names(child, skip_functions=False) & deferred_names
                if used:
                    unit = max(owner[name] for name in used)
                    guard = ast.parse(f"if _bkmcp_lazy_{unit}: _bkmcp_load({unit})").body[0]
                    for part in ast.walk(guard):
                        ast.copy_location(part, child.body[0])
                    child.body.insert(0, guard)
                    guarded[id(child)] = used
            elif isinstance(child, ast.ClassDef):
                run_now = [*child.bases, *child.keywords, *child.decorator_list] + [
                    s for s in child.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                ]
                early = {n for part in run_now for n in _loaded_names(part, skip_functions=True)} & deferred_names
                if early:
                    raise ValueError(
                        f"{filename} line {child.lineno}: {sorted(early)} (deferred) used while the class is created"
                    )
                guard_functions(child)
            elif isinstance(child, (ast.If, ast.Try, ast.For, ast.While, ast.With)):
                early = {
                    n
                    for part in ast.iter_child_nodes(child)
                    if not isinstance(part, ast.stmt)
                    for n in _loaded_names(part, skip_functions=True)
                } & deferred_names
                if early:
                    raise ValueError(f"{filename} line {child.lineno}: {sorted(early)} (deferred) used at import")
                guard_functions(child)
            else:
                early = _loaded_names(child, skip_functions=True) & deferred_names
                lambdas = {
                    n
                    for part in ast.walk(child)
                    if isinstance(part, ast.Lambda)
                    for n in _loaded_names(part.body, skip_functions=False)
                } & deferred_names
                if early or lambdas:
                    raise ValueError(
                        f"{filename} line {child.lineno}: {sorted(early | lambdas)} (deferred) used at "
                        "import or in a module-level lambda"
                    )

    guard_functions(ast.Module(body=kept, type_ignores=[]))
    _help_path_guards(kept, guarded, source.decode("utf-8").splitlines(), filename)
    flags = __future__.annotations.compiler_flag
    codes = tuple(
        marshal.dumps(
            compile(ast.Module(body=statements, type_ignores=[]), filename, "exec", flags=flags, dont_inherit=True)
        )
        for statements in deferred
    )
    constants: dict[str, Any] = {"CODES": codes, "UNITS": tuple(sorted(owner.items()))}

    class Fill(ast.NodeTransformer):
        def visit_Name(self, node: Any) -> Any:
            return ast.Constant(constants[node.id]) if node.id in constants else node

    support = Fill().visit(ast.parse(_DEFERRED_SUPPORT)).body
    flags_set = [ast.parse(f"_bkmcp_lazy_{k} = True").body[0] for k in range(1, len(units) + 1)]
    anchor = deferred[0][0] if deferred and deferred[0] else tree.body[0]
    for node in flags_set + support:
        for part in ast.walk(node):
            ast.copy_location(part, anchor)
    at = len(futures) and kept.index(futures[-1]) + 1
    tree.body = kept[:at] + flags_set + support + kept[at:]
    return tree


VENDOR_ZIP = "_bkmcp_vendor.zip"  # build_zipapp.VENDOR_ZIP


def use_vendor_zip(
    build_id: str, archive: str, sha256: str, top_level: tuple[str, ...] = (), magic: bytes | None = None
) -> None:
    """Put the pyz's nested zip of vendored packages first on sys.path, copied once into the per-user cache.

    The pyz `__main__` calls this on the first import of a vendored package (httpx, jsonschema, ...), so runs
    that need none (`--help`, `--dry-run`) read only the pyz's small zip directory. zipimport needs a file of its
    own: the first run writes the copy under a temporary name, checks its sha256 and renames it into place
    (concurrent first runs are safe); later runs only find it. Raises ImportError, saying why, when there is no
    folder to copy it to or the pyz is damaged. With the build's bytecode `magic` (the zip has a `.pyc` beside
    every `.py`), the packages `top_level` and their modules get their specs from `VendoredSpecs`, and the
    pyz's REGEX_TABLE is put to use (`use_regex_table`).
    """
    global ARCHIVE
    ARCHIVE = archive
    root = zipapp_cache_dir(build_id)
    if root is None:
        raise ImportError(
            "bkmcp.pyz: no writable folder for its vendored packages: set XDG_CACHE_HOME or TMPDIR"
            " to a folder you can write"
        )
    path = os.path.join(root, VENDOR_ZIP)
    if not os.path.isfile(path):
        import hashlib

        data = _zipapp_read(archive, VENDOR_ZIP)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ImportError(
                f"{archive} is damaged ({VENDOR_ZIP} does not match its sha256): download or build it again"
            )
        try:
            _write_atomic(root, path, data)
        except OSError as exc:  # e.g. a full disk: say what bkmcp was doing, not only errno
            raise ImportError(f"bkmcp.pyz: cannot copy its vendored packages into {root}: {exc}") from exc
    sys.path.insert(0, path)
    if magic is not None:
        VendoredSpecs.install(path, top_level, magic)
        try:  # what they compile while they load (all but a few of a command's patterns) comes from the table
            use_regex_table(_zipapp_read(archive, REGEX_TABLE))
        except OSError:  # a build without one
            pass


class VendoredSpecs:
    """A meta path finder, placed just before `PathFinder`, that gives a module of the vendor zip the very spec
    zipimport gives it, without loading its code to make it.

    zipimport's `find_spec` (3.10+; `find_loader` on 3.9) asks `spec_from_loader`, whose `get_filename` reads and
    unmarshals the module's code only to learn which file it came from; `exec_module` (`load_module` on 3.9)
    then reads and unmarshals it again. Every module of the vendor zip has its `.pyc` beside its `.py`, compiled
    by the build Python (build_zipapp.py; tests/artifact/test_pyz_vendor.py checks the zip), which zipimport
    takes first: so when this Python's bytecode magic is the build's, `get_filename` answers that `.pyc`, and
    this finder builds the spec with the public recipe (`spec_from_file_location` with the folder's own
    zipimporter as loader, which asks `is_package`) from that name. The module is then loaded once, by the same
    loader. It answers only where `PathFinder` would ask the vendor zip first — the first `sys.path` entry for a
    vendored top-level name, a vendored package's `__path__` — with the zipimporter `PathFinder` would use (its
    `sys.path_importer_cache` entry, made by `sys.path_hooks` as `PathFinder` makes it); anything else, a name the
    zip lacks included, it leaves to `PathFinder`. The spec, `__file__`, `__cached__`, `__path__` and `__loader__`
    of every module equal a plain import's (tests/artifact/test_pyz_vendor.py compares them)."""

    def __init__(self, root: str, top_level: tuple[str, ...]) -> None:
        self.root, self.inside, self.top_level = root, root + os.sep, frozenset(top_level)
        from importlib.util import spec_from_file_location
        from zipimport import zipimporter

        self.spec_from_file_location, self.zipimporter = spec_from_file_location, zipimporter

    @classmethod
    def install(cls, root: str, top_level: tuple[str, ...], magic: bytes) -> None:
        """Put a finder for the vendor zip `root` just before `PathFinder`, if it can be exact here: this
        Python's bytecode magic is `magic` and `root` is absolute (`spec_from_file_location` makes a relative
        name absolute, zipimport does not). Inserting never makes a thread walking `sys.meta_path` skip a
        finder. (From 3.14 the import system walks a copy of `sys.meta_path`, gh-130094: the import during which
        this runs, the first vendored one, goes on without it, as a plain zipimport.)"""
        from importlib.machinery import PathFinder
        from importlib.util import MAGIC_NUMBER

        if magic == MAGIC_NUMBER and os.path.isabs(root) and PathFinder in sys.meta_path:
            sys.meta_path.insert(sys.meta_path.index(PathFinder), cls(root, top_level))

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if path is None and name not in self.top_level:
            return None
        for entry in sys.path if path is None else path:
            if isinstance(entry, str):  # PathFinder skips the others
                break
        else:
            return None
        if entry != self.root and not entry.startswith(self.inside):
            return None
        try:
            importer = sys.path_importer_cache[entry]
        except KeyError:
            if not sys.path_hooks:
                return None  # PathFinder warns about that: leave it to it
            importer = None
            for hook in sys.path_hooks:  # what PathFinder does for an entry it has not seen
                try:
                    importer = hook(entry)
                    break
                except ImportError:
                    continue
            sys.path_importer_cache[entry] = importer
        if type(importer) is not self.zipimporter:
            return None
        try:
            package = importer.is_package(name)
        except ImportError:  # not a module of this folder: PathFinder looks further (namespace portions too)
            return None
        where = importer.archive + os.sep + importer.prefix + name.rpartition(".")[2]
        where += os.sep + "__init__.pyc" if package else ".pyc"
        return self.spec_from_file_location(name, where, loader=importer)


def _install_writing_finder(tree: str) -> None:
    from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader

    class _Loader(SourceFileLoader):
        def get_code(self, fullname):  # type: ignore[no-untyped-def]
            saved = sys.dont_write_bytecode
            sys.dont_write_bytecode = False  # our own cache folder: always keep the bytecode
            try:
                return super().get_code(fullname)
            finally:
                sys.dont_write_bytecode = saved

        def source_to_code(self, data, path, *, _optimize=-1):  # type: ignore[no-untyped-def,override]
            if os.path.basename(path) == "bkmcp.py":
                return lean_code(data, path)
            return super().source_to_code(data, path, _optimize=_optimize)

    prefix = tree + os.sep

    def hook(path: str) -> FileFinder:
        if path == tree or path.startswith(prefix):
            return FileFinder(path, (_Loader, SOURCE_SUFFIXES))
        raise ImportError("not bkmcp's compiled cache")

    sys.path_hooks.insert(0, hook)
    if tree in sys.path:
        sys.path.remove(tree)
    sys.path.insert(0, tree)
    for path in list(sys.path_importer_cache):
        if path == tree or path.startswith(prefix):
            del sys.path_importer_cache[path]


# ---------------------------------------------------------------------------------------- regular expressions
# re parses and compiles a pattern in Python: the ~85 that httpx, h11, http.cookiejar, email and urllib.request
# compile while they load were ~9 % of the instructions of a `--tools` over HTTP. The build records, in a child
# process of its own Python, what that Python's compiler hands `_sre.compile` for each pattern compiled while
# bkmcp loads httpx and jsonschema (`record_regexes`); the pyz stores that as REGEX_TABLE, and on the first
# vendored import the very same CPython (`regex_key`) makes those patterns from the table (`use_regex_table`).

REGEX_TABLE = "_bkmcp_regexes.marshal"  # a pyz member: marshal of (regex_key(), {(pattern, flags): arguments})


def regex_key() -> tuple[str, int, int, int, str]:
    """What the compiled form of a pattern depends on: the CPython release (its re compiler, Unicode tables), the
    `_sre` engine's version and code size, and the byte order the table's code words are written in."""
    import _sre

    return (sys.implementation.cache_tag, sys.hexversion, _sre.MAGIC, _sre.CODESIZE, sys.byteorder)


def _regex_compiler():  # type: ignore[no-untyped-def]
    """The module whose `compile(pattern, flags)` `re._compile` calls (re._compiler from 3.11, sre_compile before)."""
    import re

    return re._compiler if hasattr(re, "_compiler") else re.sre_compile  # type: ignore[attr-defined]


def record_regexes(load: Any) -> bytes:
    """Call `load()` and return REGEX_TABLE's content for the patterns compiled meanwhile, in a canonical order:
    for each str or bytes pattern and int flags, the arguments re's compiler gave `_sre.compile` after the pattern
    itself, the code words as bytes (native unsigned ints: they load ~3x faster than a list of ints), and any
    integers a later CPython may pass after the group names (3.9-3.13 pass none). A pattern that warned while it
    compiled, or asked for DEBUG output, is left out."""
    import array
    import marshal
    import re
    import warnings

    compiler = _regex_compiler()
    real_compile, real_sre, made = compiler.compile, compiler._sre, []

    class Recorder:  # stands in for `_sre` inside the compiler module: sees what `_sre.compile` is given
        def __getattr__(self, name: str) -> Any:
            return getattr(real_sre, name)

        @staticmethod
        def compile(pattern: Any, *rest: Any) -> Any:
            made.append(rest)
            return real_sre.compile(pattern, *rest)

    table = {}

    def recording(pattern: Any, flags: Any = 0) -> Any:
        del made[:]
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            compiled = real_compile(pattern, flags)
        if type(pattern) in (str, bytes) and type(flags) is int and not flags & re.DEBUG and not warned:
            ((final, code, groups, groupindex, indexgroup, *more),) = made  # more: what a later re passes after them
            words = array.array("I", code).tobytes()
            if all(type(value) is int for value in more):
                table[(pattern, flags)] = (int(final), words, int(groups), dict(groupindex), tuple(indexgroup), *more)
        return compiled

    compiler.compile, compiler._sre = recording, Recorder()
    try:
        load()
    finally:
        compiler.compile, compiler._sre = real_compile, real_sre
    ordered = dict(sorted(table.items(), key=lambda item: (type(item[0][0]).__name__, item[0])))
    return marshal.dumps((regex_key(), ordered), 2)  # version 2: no back-references, the same bytes every build


REGEX_TABLE_USED: dict[Any, Any] = {}  # the table in use, once `use_regex_table` installed it


def use_regex_table(data: bytes) -> bool:
    """Let re make each pattern of REGEX_TABLE's `data` from the table, if it was recorded by this very CPython
    (`regex_key`): `_sre.compile` gets what re's own compiler would give it, so the pattern is the same (equal,
    same flags, groups and group names), only its parsing is skipped. Any other pattern, or flags, compiles as
    ever (and `re`'s cache works as ever: it sits in front of this). Returns whether the table is in use."""
    import _sre
    import marshal

    key, table = marshal.loads(data)
    if tuple(key) != regex_key() or memoryview(b"").cast("I").itemsize != _sre.CODESIZE or REGEX_TABLE_USED:
        return False
    compiler = _regex_compiler()
    compile_pattern, make = compiler.compile, _sre.compile

    def compile(pattern: Any, flags: Any = 0) -> Any:
        entry = table.get((pattern, flags)) if type(pattern) in (str, bytes) and type(flags) is int else None
        if entry is None:
            return compile_pattern(pattern, flags)
        final, words, groups, groupindex, indexgroup, *more = entry
        return make(pattern, final, memoryview(words).cast("I").tolist(), groups, dict(groupindex), indexgroup, *more)

    compile.__wrapped__ = compile_pattern  # type: ignore[attr-defined]
    REGEX_TABLE_USED.update(table)
    compiler.compile = compile
    return True


# ---------------------------------------------------------------------------------------------------- natives
# Extension modules cannot be imported from a zip: the one for this interpreter is extracted on first use.


def _native_folders() -> list[str]:
    """Folders of `_bkmcp_native/` that may hold a module for this interpreter (see build_zipapp.py)."""
    import platform

    if sys.platform.startswith("linux"):
        # ABI-tagged names (cpython-311-x86_64-linux-gnu) let Pythons and architectures share a folder, but musl
        # CPython < 3.11 also says linux-gnu, so glibc and musl builds live apart.
        try:
            glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
        except (ValueError, OSError, AttributeError):
            glibc = False
        return ["linux"] if glibc else ["linux-musl"]
    machine = platform.machine().lower()
    return [f"{sys.platform}-{machine}", sys.platform]


def load_native_module(name: str):  # type: ignore[no-untyped-def]
    """Import extension module `name` from the pyz's natives, extracted (once) into the per-user cache.

    Returns the module, or None when not running from a pyz or the pyz has no build for this interpreter
    (or it does not load here, e.g. glibc too old). Each use re-checks the cached file's sha256.
    """
    import hashlib
    import json
    from importlib.machinery import EXTENSION_SUFFIXES

    archive = _zipapp_archive()
    if not archive:
        return None
    try:
        info = json.loads(_zipapp_read(archive, "BUILD-INFO.json"))
    except (OSError, ValueError):
        return None
    natives = info.get("natives", {})
    for folder in _native_folders():
        for suffix in EXTENSION_SUFFIXES:
            member = f"_bkmcp_native/{folder}/{name}{suffix}"
            digest = natives.get(member)
            if digest is None:
                continue
            root = zipapp_cache_dir(info["build_id"])
            if root is None:
                return None
            native_dir = os.path.join(root, "native")
            path = os.path.join(native_dir, name + suffix)
            try:
                data = _read_if_exists(path)
                if data is None or hashlib.sha256(data).hexdigest() != digest:
                    data = _zipapp_read(archive, member)
                    if hashlib.sha256(data).hexdigest() != digest:
                        return None  # the archive itself is damaged
                    _write_atomic(native_dir, path, data)
                return _import_extension(name, path)
            except (OSError, ImportError):
                return None
    return None


def _read_if_exists(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _write_atomic(folder: str, path: str, data: bytes) -> None:
    import tempfile

    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file, none, or the whole new one
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _import_extension(name: str, path: str):  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
