"""Tool help text (D02, docs/contract.md §7): content, --body example built from the schema, 80-column layout."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from test_schema_flags import ALL_TYPES, PYDANTIC, ZOD, make_tool

import bkmcp
from bkmcp import JsonNumber, parse_json, render_tool_help, validate_arguments
from tests.helpers import body_example, object_tool

RICH = {
    "name": "search_reports",
    "title": "Search reports",
    "description": "Search the report archive by keyword and status. Results are sorted by time, newest first, "
    "and paginated with --limit.\n\nSecond paragraph: 按关键词搜索报告，支持分页和过滤，返回匹配的报告"
    "列表以及相关的统计信息，结果按时间倒序排列。",
    "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True},
    "inputSchema": {
        "type": "object",
        "properties": {
            "keyword": {
                "type": "string",
                "description": "Text to search for in report titles and bodies; "
                "matching is case-insensitive and supports prefixes.",
            },
            "status": {"type": "string", "enum": ["open", "closed", "archived"], "default": "open"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "default": 20,
                "description": "Maximum number of reports.",
            },
            "verbose_output": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "timeout": {"type": "integer", "description": "Server-side timeout."},
            "since": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Since"},
        },
        "required": ["keyword", "timeout"],
    },
}


def assert_fits_80(text: str) -> None:
    for line in text.splitlines():
        if bkmcp._cell_width(line) > 80:
            assert " " not in line.strip(), f"wrappable line wider than 80 columns: {line!r}"


def test_d02_help_content() -> None:
    """D02: name, title, description, annotations, each flag with type/required/enum/default, body-only fields."""
    text = render_tool_help("report-prod", RICH)
    assert text.startswith("bkmcp report-prod search_reports - Search reports\n")
    assert "Search the report archive" in text and "Second paragraph" in text
    assert "read-only, not destructive (additive only), idempotent, open world" in text
    assert "--keyword STRING" in text and "--limit INTEGER" in text and "--verbose_output=true|false" in text
    assert "--tags JSON-ARRAY" in text
    assert "one of: open, closed, archived" in text
    assert "default: 20 (information only, not sent)" in text
    assert "limits: >= 1, <= 100" in text
    flag_lines = {line.split()[0]: line.split()[-1] for line in text.splitlines() if line.startswith("  --")}
    assert flag_lines["--keyword"] == "required" and flag_lines["--limit"] == "optional"
    section = text.split("Fields without a flag (set them with --body):")[1].split("--body example")[0]
    assert "timeout" in section and "collides with bkmcp's own option --timeout" in section
    assert "since" not in section  # "string or null" has a flag (issue 17 item 7, contract §6)
    assert "--since STRING" in text and "may also be null: only with --body" in text
    assert "Reserved names (timeout)" in section
    assert "Examples:" in text


def test_d02_required_flags_listed_first() -> None:
    """D02: required flags come before optional ones (schema order otherwise kept)."""
    tool = make_tool({"b": {"type": "string"}, "a": {"type": "integer"}, "c": {"type": "string"}}, required=["c"])
    flags = [line.split()[0] for line in render_tool_help("s", tool).splitlines() if line.startswith("  --")]
    assert flags == ["--c", "--b", "--a"]


@pytest.mark.parametrize("tool", [RICH, ALL_TYPES, PYDANTIC, ZOD])
def test_d02_body_example_is_valid_and_required_first(tool: dict[str, Any]) -> None:
    """D02: the --body example parses as JSON, lists required fields first and passes local validation."""
    text = render_tool_help("srv", tool)
    example = body_example(text)
    required = tool["inputSchema"].get("required", [])
    assert list(example)[: len(required)] == required
    validate_arguments(tool, example)


def test_d02_body_example_placeholders() -> None:
    """D02: placeholders follow enum, default, minimum and type."""
    example = body_example(render_tool_help("srv", RICH))
    assert example["keyword"] == "<keyword>"
    assert example["timeout"] == 1
    assert example["status"] == "open"
    assert example["limit"] == 20
    assert body_example(render_tool_help("s", {"name": "t", "inputSchema": {"type": "object"}})) == {}


def test_d02_pydantic_nested_example() -> None:
    """D02: local $ref models expand in the example (pydantic $defs)."""
    defs = PYDANTIC["inputSchema"]["$defs"]
    tool = make_tool({"shape": {"$ref": "#/$defs/Shape"}}, required=["shape"], **{"$defs": defs})
    example = body_example(render_tool_help("s", tool))
    assert example == {"shape": {"name": "<name>", "points": [{"x": 1, "y": 0}]}}
    validate_arguments(tool, example)


def test_d02_fits_80_columns() -> None:
    """D02: no wrappable line is wider than 80 terminal columns (CJK counts double)."""
    for tool in (RICH, ALL_TYPES, PYDANTIC, ZOD):
        assert_fits_80(render_tool_help("report-prod", tool))
    long_names = make_tool(
        {f"property_number_{i}_with_a_long_name": {"type": "object", "description": "x " * 90} for i in range(12)},
        required=["property_number_0_with_a_long_name"],
    )
    assert_fits_80(render_tool_help("a-server-with-a-long-name", long_names))


def test_d02_cjk_wraps_by_display_width() -> None:
    """D02: a Chinese description without spaces wraps by display width, keeping every character."""
    text = "参数说明" * 40
    help_text = render_tool_help("s", {"name": "t", "description": text, "inputSchema": {"type": "object"}})
    desc_lines = [line for line in help_text.splitlines() if "参" in line or "数" in line]
    assert len(desc_lines) > 3
    assert all(bkmcp._cell_width(line) <= 80 for line in desc_lines)
    assert "".join(line.strip() for line in desc_lines) == text


def test_d02_server_text_cannot_inject_terminal_escapes() -> None:
    """D02: control characters from the server are shown escaped, never emitted raw."""
    properties = {
        "a\x1bb": {"type": "string", "description": "\x1b[2J"},
        "ok": {"type": "string", "description": "x\x1b[2Jy"},
    }
    tool = object_tool("t\x1b[31m", properties, title="red\x1b[0m", description="bell\x07 and \x1b]0;title\x07")
    text = render_tool_help("s", tool)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\u001b" in text


def test_d02_no_flags_tool() -> None:
    """D02: a tool without properties shows no flags and how to call it."""
    text = render_tool_help("s", {"name": "ping", "inputSchema": {"type": "object"}})
    assert "Flags: none" in text and "  bkmcp s ping\n" in text


def test_d02_required_body_only_field_explained() -> None:
    """D02/P05: when a required field has no flag, examples say to call with --body."""
    tool = make_tool({"body": {"type": "string"}, "x": {"type": "string"}}, required=["body"])
    text = render_tool_help("s", tool)
    assert "required field body has no flag" in text
    assert body_example(text) == {"body": "<body>", "x": "<x>"}


def test_d02_many_properties_example_is_capped() -> None:
    """D02: a 50-property schema shows a short example and says how many optional fields were left out."""
    tool = make_tool({f"p{i}": {"type": "string"} for i in range(50)}, required=["p3"])
    text = render_tool_help("s", tool)
    assert "(44 more optional fields not shown)" in text
    assert list(body_example(text))[0] == "p3"
    assert "[FLAGS...]" in text


def test_d02_flag_examples_are_shell_safe() -> None:
    """D02: example values with quotes are shell-quoted correctly."""
    tool = make_tool(
        {"q": {"type": "string", "default": "it's"}, "o": {"type": "object", "default": {"a": "'"}}},
        required=["q", "o"],
    )
    text = render_tool_help("s", tool)
    line = next(line for line in text.splitlines() if line.startswith("  bkmcp s search_reports --q '"))
    words = shlex.split(line)
    assert words[words.index("--q") + 1] == "it's"
    assert parse_json(words[words.index("--o") + 1]) == {"a": "'"}


def test_d02_example_sources_and_limits() -> None:
    """D02: examples/const feed placeholders; const and limits are shown; long arrays break over lines."""
    tool = make_tool(
        {
            "fixed": {"type": "string", "const": "v1"},
            "sample": {"type": "string", "examples": ["ex-1"]},
            "nothing": {"type": "null"},
            "many": {"type": "array", "items": {"type": "string", "default": "x" * 30}, "minItems": 1},
            "score": {"type": "number", "minimum": JsonNumber("0.5")},
        },
        required=["fixed", "sample", "nothing", "many", "score"],
    )
    text = render_tool_help("srv", tool)
    assert 'must be: "v1"' in text and "limits: >= 0.5" in text and "limits: min items 1" in text
    example = body_example(text)
    assert example["fixed"] == "v1" and example["sample"] == "ex-1" and example["nothing"] is None
    assert example["score"] == JsonNumber("0.5")
    validate_arguments(tool, example)
    assert_fits_80(text)


def test_d02_mixed_cjk_and_latin_wrap() -> None:
    """D02: words mixing CJK and Latin wrap by width without losing characters."""
    words = ["MCP服务器", "gateway错误", "网关error码", "abc"] * 12
    text = bkmcp._wrap(" ".join(words), 40, "  ", "  ")
    assert all(bkmcp._cell_width(line) <= 40 for line in text)
    assert "".join("".join(line.split()) for line in text) == "".join(words)


def test_d02_title_only_shown_when_informative() -> None:
    """D02: a pydantic title that only repeats the name is not shown; a real one is."""
    tool = make_tool(
        {"page_size": {"type": "integer", "title": "Page Size"}, "q": {"type": "string", "title": "Search query"}}
    )
    text = render_tool_help("s", tool)
    assert "Page Size" not in text and "Search query" in text


def test_d02_long_enum_is_capped() -> None:
    """D02: a 200-value enum shows 30 values and says how many more there are."""
    tool = make_tool(
        {
            "code": {"type": "string", "enum": [f"v{i}" for i in range(200)]},
            "odd": {"type": "string", "enum": ["a,b", " pad", ""]},
        }
    )
    text = render_tool_help("s", tool)
    assert "v29\n      … and 170 more (see --tools)" in text and "v30," not in text
    assert 'one of: "a,b", " pad", ""' in text


def test_d02_tool_names_are_shell_quoted_in_commands() -> None:
    """D02: a tool name with spaces or quotes appears shell-quoted in usage and examples; hints too."""
    tool = {"name": "my tool's", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}
    text = render_tool_help("srv", tool)
    usage = text.split("Usage:\n")[1].splitlines()[0]
    assert shlex.split(usage)[:4] == ["bkmcp", "srv", "my tool's", "[--q"]
    example = next(line for line in text.splitlines() if "--body @args.json" in line)
    assert shlex.split(example)[2] == "my tool's"
    with pytest.raises(bkmcp.InvalidArgumentsError) as info:
        bkmcp.parse_tool_arguments(tool, [bkmcp.ToolToken("x", "1", False, "--x")], server_name="srv")
    hint = info.value.hint or ""
    assert shlex.split(hint.split(": ", 1)[1]) == ["bkmcp", "srv", "my tool's", "--help"]


def test_d02_wrapped_example_commands_are_copy_pasteable() -> None:
    """D02: a long flag example wraps between words with ' \\' continuations and never inside a quoted value."""
    tool = make_tool(
        {f"parameter_{i}": {"type": "string", "default": "two words"} for i in range(4)},
        required=[f"parameter_{i}" for i in range(4)],
    )
    text = render_tool_help("a-long-server-name", tool)
    lines = text.split("Examples:\n")[1].splitlines()
    first = next(i for i, line in enumerate(lines) if "--parameter_0" in line)
    block = []
    for line in lines[first:]:
        block.append(line)
        if not line.endswith(" \\"):
            break
    assert len(block) > 1 and all(bkmcp._cell_width(line) <= 80 for line in block)
    words = shlex.split("\n".join(block))
    assert words[3:5] == ["--parameter_0", "two words"] and words.count("two words") == 4


# -- issue 27: every argument has a flag (item 2), help reads cleanly (item 7) ---------------------------------


def test_union_flag_help_shows_member_types_and_worked_examples() -> None:
    """Issue 27 item 2: a JSON-value flag's help names its member types and shows a worked example for each kind,
    the string one written as JSON; the example command uses the flag and parses back as JSON."""
    from test_schema_flags import SEQUENTIAL

    text = render_tool_help("think", SEQUENTIAL)
    assert "--nextThoughtNeeded JSON  required" in text
    assert (
        "      a JSON value: boolean or string, read as JSON text (a string is written in\n"
        "      JSON quotes), e.g.\n"
        "      --nextThoughtNeeded true, --nextThoughtNeeded '\"text\"'\n"
    ) in text
    examples = text.split("Examples:\n")[1].split("\n\n")[0].replace(" \\\n", " ")
    words = shlex.split(examples.splitlines()[0])
    assert words[words.index("--nextThoughtNeeded") + 1] == "true"
    assert "so call this tool with --body" not in text  # every required field has a flag: examples use flags
    assert "A JSON-value flag's text is JSON: write a string in JSON quotes." in " ".join(text.split())


def test_ref_flags_help_as_if_inline_and_unfollowable_refs_say_why() -> None:
    """Issue 27 item 2: an enum behind a $ref lists its values, a model is a JSON-object flag; a remote or
    recursive $ref is listed under "Fields without a flag" with why."""
    from test_schema_flags import SDK_SHRIMP

    text = render_tool_help("sdk", SDK_SHRIMP)
    assert "--tank JSON-OBJECT" in text and "--color STRING" in text and "one of: red, green" in text
    assert "--extra JSON" in text and "a JSON value: object or null" in text
    assert "Fields without a flag" not in text
    tool = make_tool(
        {"doc": {"$ref": "https://example.com/doc.json"}, "tree": {"$ref": "#/$defs/T"}, "n": {"type": "integer"}},
        required=["doc"],
        **{"$defs": {"T": {"$ref": "#/$defs/T"}}},
    )
    section = " ".join(render_tool_help("srv", tool).split("Fields without a flag (set them with --body):")[1].split())
    assert "doc required no flag: remote $ref (https://example.com/doc.json): not fetched" in section
    assert "tree optional no flag: recursive $ref (#/$defs/T leads back to itself before reaching a type)" in section
    assert "required field doc has no flag, so call this tool with --body" in section


# zod (TypeScript SDK, server-everything and most npm servers): z.number().int() becomes an integer bounded by
# Number.MAX_SAFE_INTEGER on both sides.
ZOD_INT = make_tool(
    {
        "count": {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
        "page": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9007199254740991},
        "n": {"type": ["integer", "null"], "minimum": -9007199254740991},
        "ratio": {"type": "number", "maximum": 9007199254740991},
    },
    required=["count"],
)


def test_js_safe_integer_bounds_are_not_shown_as_limits() -> None:
    """Issue 27 item 7: ±9007199254740991 on an integer is not a limit in help (nor the example's placeholder);
    any other bound is shown as before, and validation still applies the schema."""
    text = render_tool_help("srv", ZOD_INT)
    assert "limits: > 0\n" in text  # page keeps its real bound
    assert text.count("9007199254740991") == 1 and "limits: <= 9007199254740991" in text  # the number's: shown
    assert body_example(text)["count"] == 1
    with pytest.raises(bkmcp.InvalidArgumentsError):
        validate_arguments(ZOD_INT, {"count": 9007199254740992})


def test_hard_wrapped_descriptions_flow_as_paragraphs() -> None:
    """Issue 27 item 7: single line breaks inside a paragraph are joined before wrapping; blank lines, list items
    and indented lines keep their own lines; CJK lines join without a space."""
    description = (
        "Fetches a URL from the internet and optionally extracts its\ncontents as markdown.\n\n"
        "Although originally you did not have internet access, and were\nadvised to refuse, this tool now grants "
        "you\ninternet access.\n- first item\n- second item that\n  continues\n1. numbered\n    code line\n"
        "参数说明\n继续"
    )
    tool = {"name": "fetch", "description": description, "inputSchema": {"type": "object"}}
    head = render_tool_help("srv", tool).split("\nUsage:")[0]
    assert head.split("\n", 1)[1] == (
        "\n"
        "  Fetches a URL from the internet and optionally extracts its contents as\n"
        "  markdown.\n"
        "\n"
        "  Although originally you did not have internet access, and were advised to\n"
        "  refuse, this tool now grants you internet access.\n"
        "  - first item\n"
        "  - second item that\n"
        "    continues\n"
        "  1. numbered\n"
        "      code line\n"
        "  参数说明继续\n"
    )
    flag = make_tool({"q": {"type": "string", "description": "one\ntwo\n\nthree"}})
    assert "      one two\n\n      three\n" in render_tool_help("srv", flag)


def test_a_long_list_item_wraps_under_its_text() -> None:
    """Issue 27 item 7: a wrapped list item continues under its text (a hanging indent), within 80 columns."""
    lines = bkmcp._wrap("- " + "word " * 30, 40, "  ", "  ")
    assert lines[0].startswith("  - word") and all(line.startswith("    word") for line in lines[1:])
    assert all(bkmcp._cell_width(line) <= 40 for line in lines)


def test_a_long_object_flag_example_shows_its_required_properties() -> None:
    """Issue 27 item 2: a model flag ($ref) whose example would not fit one line shows only the model's required
    properties, so the example command stays within 80 columns."""
    tank = {
        "type": "object",
        "properties": {"name": {"type": "string"}, **{f"optional_{i}": {"type": "string"} for i in range(4)}},
        "required": ["name"],
    }
    tool = make_tool({"tank": {"$ref": "#/$defs/Tank"}}, required=["tank"], **{"$defs": {"Tank": tank}})
    text = render_tool_help("srv", tool)
    example = text.split("Examples:\n")[1].splitlines()[0]
    assert shlex.split(example)[-2:] == ["--tank", '{"name":"<name>"}']
    assert_fits_80(text)
