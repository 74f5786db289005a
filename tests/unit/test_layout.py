"""The module's layout (issue 18 items 6 and 10): sections in order, each using only those above it, the module
docstring listing them, and every behaviour of the list below one jump away: the docstring line of the section it
names mentions it, and the definition that implements it is inside that section (or sub-section)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

import bkmcp
import zipapp_support
from tests.helpers import routed_options

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "bkmcp.py").read_text(encoding="utf-8")


def defined_names(node: ast.stmt) -> list[str]:
    """The module-level names one top-level statement defines (a def, a class, a plain assignment)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def sections_and_violations(source: str) -> tuple[list[tuple[int, int]], list[tuple[int, str, int, int]]]:
    """(section starts, references of a section to a name defined in a section below it)."""
    starts = zipapp_support.section_starts(source)  # what a section is: the build's deferred sections read it too

    def section_of(lineno: int) -> int:
        return zipapp_support.section_of(starts, lineno)

    tree = ast.parse(source)
    defined: dict[str, int] = {}
    for node in tree.body:
        for name in defined_names(node):
            defined.setdefault(name, section_of(node.lineno))
    violations = []
    for node in tree.body:
        own = section_of(node.lineno)
        if own == 0:
            continue
        for sub in ast.walk(node):  # annotations are strings at run time (from __future__ import annotations)
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sub.returns = None
                arguments = sub.args
                for arg in [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    arguments.vararg,
                    arguments.kwarg,
                ]:
                    if arg is not None:
                        arg.annotation = None
            elif isinstance(sub, ast.AnnAssign):
                sub.annotation = ast.Constant(None)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and defined.get(sub.id, 0) > own:
                violations.append((own, sub.id, defined[sub.id], sub.lineno))
    return starts, violations


def test_each_section_uses_only_the_sections_above_it():
    starts, violations = sections_and_violations((ROOT / "bkmcp.py").read_text(encoding="utf-8"))
    assert [num for _line, num in starts] == list(range(1, 12))
    assert violations == []


def test_the_section_rule_check_catches_an_upward_reference():
    source = (
        "# =====\n# 1. A\n# =====\ndef low():\n    return high()\n\n"
        "# =====\n# 2. B\n# =====\ndef high():\n    return low()\n"
    )
    _starts, violations = sections_and_violations(source)
    assert violations == [(1, "high", 2, 5)]


def test_the_module_docstring_lists_the_sections_of_the_file():
    source = (ROOT / "bkmcp.py").read_text(encoding="utf-8")
    banners = re.findall(r"^# =+\n# (\d+)\. ([^\n]+)", source, flags=re.M)
    listed = re.findall(r"^ {3,4}(\d+)\. (\S[^\n]*?)\s{2,}", bkmcp.__doc__ or "", flags=re.M)
    assert [n for n, _ in banners] == [n for n, _ in listed]
    for (number, banner), (_n, title) in zip(banners, listed):
        first = title.split()[0].rstrip(",:&").lower()
        assert first in banner.lower(), (number, banner, title)


# (behaviour, the section the docstring sends a reader to, a word of that section's docstring line, the definition)
BEHAVIOURS = [
    ("stable error codes and exit statuses", "1", "error code", "BkmcpError"),
    ("JSON numbers kept exact", "2.1", "JSON", "parse_json"),
    ("secrets scrubbed from output", "2.2", "scrubbed", "Redactor"),
    ("--timeout 30s / 500ms parsing", "2.3", "durations", "parse_duration"),
    ("the 60 s default budget", "2.3", "default timeout", "DEFAULT_TIMEOUT"),
    ("the progress line on a terminal", "2.5", "progress line", "ProgressLine"),
    ("which mcp.json is read", "3", "file selection", "resolve_config_path"),
    ("where ~ and relative paths point", "3", "file selection", "expand_user_path"),
    ("${VAR} in headers and env", "3", "${VAR} expansion", "expand_env"),
    ("Bearer vs X-Bkapi-Authorization conflicts", "4", "conflicts", "check_auth_conflict"),
    ("SSE decoding", "5.3", "SseDecoder", "SseDecoder"),
    ("which answer belongs to which request", "5.6", "matching rule", "ClientSession"),
    ("modern probe, legacy fallback", "5.7", "legacy fallback", "Negotiation"),
    ("HTTP, many POSTs on one pooled client", "6", "HTTP via httpx", "HttpTransport"),
    ("a stdio child's process group and reaping", "6", "child-process supervision", "ChildProcess"),
    ("many requests in flight on one session", "7.1", "McpSession", "McpSession"),
    ("the per-operation deadline and logger", "7.1", "OpContext", "OpContext"),
    ("tools/list pagination", "7.3", "pagination", "discover_tools"),
    # issue 38: resources, templates and prompts
    ("one pagination for tools, resources, templates and prompts", "7.3", "discover_listing", "discover_listing"),
    ("no request to a server without the capability", "7.3", "require_capability", "require_capability"),
    ("an unknown URI's stable code", "7.3", "mcp_resource_not_found", "read_resource"),
    ("--resources, --read, --prompts, --prompt", "7.4", "--resources", "run_resources"),
    ("RFC 6570 templates expanded locally", "2.6", "RFC 6570", "expand_uri_template"),
    ("--out: a blob's file name never a server's path", "2.7", "build_blob_name", "build_blob_name"),
    ("--out: no link followed, no file overwritten", "2.7", "O_NOFOLLOW", "BlobWriter"),
    ("--out: the blobs of a result found and replaced", "9.7", "find_blobs", "save_blobs"),
    ("--max-blob-bytes checked before anything is written", "9.7", "--max-blob-bytes", "decode_blobs"),
    ("a skill file verified against its digest and size", "5.10", "digest", "verify_skill_file"),
    ("SKILL.md's frontmatter compared with the listing's", "5.10", "frontmatter", "parse_frontmatter"),
    ("the skills extension declared only by skill commands", "7.4", "SkillSessions", "SkillSessions"),
    ("--skills, --skill: files read lazily, each verified", "7.4", "load_skill", "run_skill"),
    ("--skill NAME --out DIR: a verified copy", "9.7", "save_skill", "save_skill"),
    ("a prompt's arguments as string flags", "8.4", "prompt", "parse_prompt_arguments"),
    ("a read's texts and a prompt's messages under -r", "9.3", "render_raw_data", "render_raw_data"),
    ("--prompt NAME --help", "9.6", "render_prompt_help", "render_prompt_help"),
    ("Mcp-Name for resources/read and prompts/get", "5.4", "Mcp-Name", "build_headers"),
    # issue 38 item 7: the resident's resources and prompts, on the CLI's paths
    ("resources and prompts listed for the CLI and the resident alike", "7.3", "list_resources", "list_resources"),
    ("a prompt's arguments checked before prompts/get", "8.4", "check_prompt_arguments", "check_prompt_arguments"),
    ("the resident's list_resources, read_resource, list_prompts, get_prompt", "10.4.3", "read_resource", "Actions"),
    ("a resident blob answered as its size and sha256", "10.4.3", "sha256", "build_resource_contents"),
    ("the resource-reading tool list_tools injects", "10.3.2", "--inject-resource-tools", "build_resource_reader"),
    ("an event's URI without its query string", "10.2.1", "build_event_uri", "build_event_uri"),
    ("a skill verified by one path for --skill and read_skill", "7.4", "load_skill", "load_skill"),
    ("the resident's list_skills and read_skill", "10.4.3", "read_skill", "Actions"),
    (
        "the skills extension declared per request, or a legacy server's own session",
        "10.2.2",
        "with_skills",
        "ResidentSession.with_skills",
    ),
    ("--max-blob-bytes: one decoded blob, CLI and resident alike", "2.7", "blob_too_large", "blob_over_cap"),
    ("calling a tool, never resent", "7.3", "call", "call_tool"),
    ("inputSchema to --flags", "8.3", "typed flags", "build_tool_flags"),
    ("arguments checked before the call", "8.6", "checked", "validate_arguments"),
    ("the ok:false envelope", "9.1", "build_failure", "build_failure"),
    ("a tool's --help text", "9.6", "tool help", "render_tool_help"),
    ("a user's credential row", "10.1.1", "credential", "select_credential"),
    ("the SQLite registry", "10.1.2", "SQLite", "SqliteRegistry"),
    ("process limits, eviction, the idle reaper", "10.2.5", "reaper", "SessionPool"),
    ("resident events", "10.2.1", "EventSink", "EventSink"),
    ("a resident's stderr nobody reads never blocks a command", "2.4", "line writer", "LineWriter"),
    ("mcp_{server}_{tool} names", "10.3.1", "build_injected_names", "build_injected_names"),
    ("the tool catalogue cache of a resident session", "10.3.3", "Catalogues", "Catalogues"),
    ("what call_tool does in resident mode", "10.4.3", "Actions", "Actions"),
    ("which kept session a --keep-alive call gets", "10.5", "WarmSessions", "WarmSessions"),
    ("the --keep-alive background process", "11.4", "WarmServer", "WarmServer"),
    ("the bounded worker pool", "10.4.2", "worker pool", "WorkerPool"),
    ("the bounded line reader (resident stdin, a stdio server's stdout)", "6.3", "line reader", "read_lines"),
    ("a stdio server's stdout line that is not JSON-RPC is skipped", "6.4", "skipped", "StdioTransport"),
    ("argv routing", "11.1", "parse_argv", "parse_argv"),
    ("exception to exit status", "11.5", "exit ladder", "main"),
    # the twenty of issue 31 item 1 (a reviewer's one-jump test): a method is found through its class
    ("the retry-after back-off of a crashed stdio child (resident)", "10.2.5", "back-off", "SessionPool"),
    ("where --jq is applied", "9.2", "JqProgram", "JqProgram"),
    ("where injected names are shortened", "10.3", "shortened", "build_injected_names"),
    ("SSE resumption (GET + Last-Event-ID)", "6.2", "resumption", "HttpTransport._resume"),
    ("the warm-session key", "10.5", "warm_session_key", "warm_session_key"),
    ("why a property gets no flag", "8.1", "no flag", "BodyOnlyField"),
    ("the budget of $ref resolution (a schema too large to type)", "8.2", "budget", "SchemaWork"),
    ("the Mcp-Session-Id that initialize issues", "5.6", "Mcp-Session-Id", "ClientSession.session_issued"),
    ("HTTP 401/403 to mcp_auth_required/mcp_permission_denied", "6.2", "401/403", "HttpTransport._check_status"),
    ("HTTP statuses other than 401/403", "6.2", "status_failure", "status_failure"),
    ("notifications/cancelled after a timeout or Ctrl-C", "7.3", "notifications/cancelled", "_cancel"),
    ("which environment variables a stdio child inherits", "4", "inherits", "select_inherited_env"),
    ("--body @file / - read and bounded", "11.2", "--body", "read_body"),
    ("a tool excluded for a bad x-mcp-header declaration", "5.8", "x-mcp-header", "split_excluded_tools"),
    ("the shell completion scripts", "9.5", "completion", "render_completion"),
    ("every resident command answered at shutdown, EOF or a signal", "10.4.4", "answers all", "ResidentServer.drain"),
    ("a resident error worded for the platform", "10.4.1", "platform", "platform_error"),
    ("catalogue freshness by ttlMs", "7.3", "ttlMs", "catalogue_kept_until"),
    ("a config file's duplicate key rejected", "2.1", "duplicate key", "_strict_pairs"),
    ("--max-user-processes enforced", "10.2", "--max-user-processes", "SessionPool"),
    ("a warm background process that dies mid-call", "11.4", "dies", "_warm_relay"),
    ("a stdio server's stderr in an error", "6.4", "stderr", "StdioTransport._with_stderr"),
    ("the --keep-alive client and its background process", "11.4", "--keep-alive", "WarmServer"),
    ("a warm client's Ctrl-C reaching the operation in the background process", "11.4", "Ctrl-C", "Interrupt"),
    ("the CLI's wording of an error", "11.5", "word_for_cli", "word_for_cli"),
    ("main and the exit ladder, last", "11.5", "main", "report_error"),
    (
        "a short command's exit without the interpreter's last collection",
        "11.5",
        "last collection",
        "_end_without_a_last_collection",
    ),
]


@functools.cache  # SOURCE does not change: read once per run (each behaviour row asks)
def _docstring_lines() -> dict[str, str]:
    """Section number ("2", "10.3") -> its docstring line, continuation lines joined."""
    listing = (bkmcp.__doc__ or "").split("uses only the sections above it:", 1)[1].split("Exception tree", 1)[0]
    lines: dict[str, str] = {}
    current = None
    for raw in listing.splitlines():
        found = re.match(r"^ {3,7}(\d+(?:\.\d+)+|\d+\.) (.*)$", raw)
        if found:
            current = found.group(1).rstrip(".")
            lines[current] = found.group(2)
        elif current and raw.strip():
            lines[current] += " " + raw.strip()
    return lines


def _banners(source: str) -> list[tuple[int, str]]:
    """(line, number) of every section's banner and numbered room's ``# -- N.M`` banner, in order."""
    marks = [(line, str(number)) for line, number in zipapp_support.section_starts(source)]
    marks += [
        (index + 1, found.group(1))
        for index, text in enumerate(source.splitlines())
        if (found := re.match(r"^# -- (\d+(?:\.\d+)+) ", text))
    ]
    return sorted(marks)


@functools.cache  # SOURCE does not change: read once per run (each behaviour row asks)
def _extents() -> dict[str, tuple[int, int]]:
    """Section number -> (first line, last line) of its code, sub-sections from their ``# -- 10.N`` banners."""
    lines = SOURCE.splitlines()
    marks = _banners(SOURCE)
    extents: dict[str, tuple[int, int]] = {}
    for (start, number), (after, _next) in zip(marks, [*marks[1:], (len(lines) + 1, "")]):
        extents[number] = (start, after - 1)
        parts = number.split(".")
        for depth in range(1, len(parts)):  # a room lies inside its section and the rooms that number it
            outer = ".".join(parts[:depth])
            extents[outer] = (min(extents[outer][0], start), max(extents[outer][1], after - 1))
    return extents


@functools.cache  # SOURCE does not change: read once per run (each behaviour row asks)
def _definitions() -> dict[str, int]:
    """Name -> line of every module-level definition, and ``Class.method`` -> its class's line (a method is found
    through its class)."""
    found: dict[str, int] = {}
    for node in ast.parse(SOURCE).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.setdefault(node.name, node.lineno)
            for member in node.body if isinstance(node, ast.ClassDef) else ():
                if isinstance(member, ast.FunctionDef):
                    found.setdefault(f"{node.name}.{member.name}", node.lineno)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, node.lineno)
    return found


@pytest.mark.parametrize(("behaviour", "section", "word", "name"), BEHAVIOURS, ids=[b[0] for b in BEHAVIOURS])
def test_every_behaviour_is_one_jump_from_the_module_docstring(behaviour, section, word, name):
    line = _docstring_lines()[section]
    assert word.lower() in line.lower(), f"{behaviour}: section {section}'s docstring line does not say {word!r}"
    start, end = _extents()[section]
    defined = _definitions()[name]
    assert start <= defined <= end, f"{behaviour}: {name} is at line {defined}, not in section {section}"


def test_the_behaviour_list_is_long_enough_to_mean_something():
    assert len(BEHAVIOURS) >= 20
    assert {section.split(".")[0] for _b, section, _w, _n in BEHAVIOURS} == {str(n) for n in range(1, 12)}
    assert {"10.1.1", "10.2.5", "10.3.3", "10.4.3"} <= {section for _b, section, _w, _n in BEHAVIOURS}
    assert {"6.2", "6.4", "10.5", "11.2", "11.4", "11.5"} <= {section for _b, section, _w, _n in BEHAVIOURS}
    assert sum(1 for _b, _s, _w, name in BEHAVIOURS if "." in name) >= 5  # methods, found through their class


def test_every_sub_section_of_the_docstring_has_its_banner():
    listed = {number for number in _docstring_lines() if "." in number}
    assert listed == {number for number in _extents() if "." in number}


# -- issue 37 item 1: every room numbered, listed and within its budget ------------------------------------------------

ROOM_BUDGET = 900  # lines of one room (a banner to the next): past it, split the room by job into numbered sub-rooms
_BANNER = re.compile(r"^# -- .*-{3,}$")


def _rooms(source: str) -> list[tuple[str, int]]:
    """(number, lines) of every leaf room: from a section's or a numbered room's banner to the next banner."""
    lines = source.splitlines()
    marks = _banners(source)
    return [(number, after - start) for (start, number), (after, _n) in zip(marks, [*marks[1:], (len(lines) + 1, "")])]


def test_every_banner_is_numbered():
    unnumbered = [
        text for text in SOURCE.splitlines() if _BANNER.match(text) and not re.match(r"^# -- \d+(?:\.\d+)+ ", text)
    ]
    assert unnumbered == []


def test_no_room_is_over_its_budget():
    assert [(number, size) for number, size in _rooms(SOURCE) if size > ROOM_BUDGET] == []


def test_the_room_checks_catch_an_unnumbered_banner_and_a_room_over_budget():
    source = "# " + "=" * 20 + "\n# 1. A\n# " + "=" * 20 + "\n" + "x = 1\n" * (ROOM_BUDGET + 1)
    assert _rooms(source)[0][1] > ROOM_BUDGET
    assert _BANNER.match("# -- logging ----------") and not re.match(r"^# -- \d", "# -- logging ---")


def test_every_numbered_room_is_in_the_docstring_and_every_listed_room_has_its_banner():
    listed = set(_docstring_lines())
    numbered = {number for number, _size in _rooms(SOURCE)}
    assert listed == numbered


def _user_facing_options() -> set[str]:
    """Every option a user can type (argv routing's tables, --brief and --keep-alive) that a help text names."""
    parsed = {name for name in routed_options() if name.startswith("--")} | {"--brief", "--keep-alive"}
    shown = set(re.findall(r"--[a-z][a-z-]+", bkmcp.render_root_help("mcp.json") + bkmcp.render_resident_help()))
    return parsed & shown


def test_every_user_facing_option_is_named_on_a_room_line_of_the_docstring():
    options = _user_facing_options()
    assert {"--tools", "--brief", "--sessions", "--keep-alive", "--raw", "--jq", "--idle-timeout"} <= options
    listing = " ".join(_docstring_lines().values())
    assert sorted(o for o in options if not re.search(re.escape(o) + r"(?![a-z-])", listing)) == []


# -- issue 37 item 4: test files a reader can take in ------------------------------------------------------------------

TEST_FILE_BUDGET = 1500  # lines of one test file, unless its docstring says why it is longer
_LONGER_BECAUSE = "Longer than 1,500 lines because"


def _long_test_files() -> list[str]:
    long = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > TEST_FILE_BUDGET and _LONGER_BECAUSE not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(str(path.relative_to(ROOT)))
    return long


def test_no_test_file_passes_its_budget_without_saying_why():
    assert _long_test_files() == []


def test_test_files_are_named_after_an_area_not_an_issue():
    named_after_issues = [p.name for p in (ROOT / "tests").rglob("test_*.py") if re.search(r"_\d+\.py$", p.name)]
    assert named_after_issues == []


# -- issue 37 item 2: walls a test can see --------------------------------------------------------------------------


def _wall_violations(source: str) -> list[tuple[str, str, str, int]]:
    """(name, its room, the room using it, line) of every private module-level name (``_x``) used outside its room.
    A room is a numbered ``N.M`` banner (its ``N.M.K`` sub-rooms share it), else a whole section; what another room
    needs it exports under a public name."""
    lines = source.splitlines()
    marks = [(line, str(number)) for line, number in zipapp_support.section_starts(source)]
    marks += [
        (index + 1, found.group(1))
        for index, text in enumerate(lines)
        if (found := re.match(r"^# -- (\d+(?:\.\d+)+) ", text))
    ]
    marks.sort()

    def room_of(lineno: int) -> str:
        room = "0"
        for start, number in marks:
            if start > lineno:
                break
            room = ".".join(number.split(".")[:2])
        return room

    tree = ast.parse(source)
    private: dict[str, str] = {}
    for node in tree.body:
        for name in defined_names(node):
            if name.startswith("_") and not name.startswith("__"):
                private.setdefault(name, room_of(node.lineno))
    found = []
    for node in tree.body:
        room = room_of(node.lineno)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in private and private[sub.id] != room:
                found.append((sub.id, private[sub.id], room, sub.lineno))
    return found


def test_a_private_name_is_used_only_in_its_room():
    assert _wall_violations(SOURCE) == []


def test_the_wall_check_catches_a_private_name_used_next_door():
    source = (
        "# =====\n# 1. A\n# =====\n# -- 1.1 one ---\ndef _inner():\n    return 1\n\n"
        "# -- 1.2 two ---\ndef outer():\n    return _inner()\n"
    )
    assert _wall_violations(source) == [("_inner", "1.1", "1.2", 10)]
