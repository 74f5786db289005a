"""One checker per model family for the definitions the resident hands a platform (docs/resident.md, "Definitions
for each model family"). Each encodes its family's own documented rules, read on 2026-12-04, independently of
bkmcp's shaping code (it shares no code with it):

- OpenAI function calling, https://platform.openai.com/docs/guides/function-calling: ``name`` matches
  ``^[a-zA-Z0-9_-]{1,64}$``; ``parameters`` is a JSON Schema object whose top level is ``type: object``
  (no ``oneOf``/``anyOf``/``allOf``/``enum``/``not`` there; the API answers 400 otherwise).
- OpenAI Structured Outputs, https://platform.openai.com/docs/guides/structured-outputs#supported-schemas
  (``strict: true``): the root is an object, not ``anyOf``; every object has ``additionalProperties: false``
  and lists every property in ``required``; types string, number, integer, boolean, object, array, null (and
  ``anyOf``, ``enum``, ``const``); supported keywords only (string: pattern, format of date-time, time, date,
  duration, email, hostname, ipv4, ipv6, uuid; number/integer: minimum, maximum, exclusiveMinimum,
  exclusiveMaximum, multipleOf; array: minItems, maxItems); at most 5000 properties, 10 levels of nesting,
  1000 enum values.
- Anthropic tool use, https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use:
  ``name`` matches ``^[a-zA-Z0-9_-]{1,64}$``; ``input_schema`` is a JSON Schema object with ``type: object``
  at the top (no ``oneOf``/``anyOf``/``allOf`` at the top level).
- Gemini, https://ai.google.dev/api/caching#FunctionDeclaration and https://ai.google.dev/api/caching#Schema:
  the name starts with a letter or ``_`` and has at most 64 of ``[A-Za-z0-9_.-]``; ``parameters`` is a
  ``Schema``, an OpenAPI 3.0 subset: only its listed fields, ``type`` one of the ``Type`` enum (STRING, NUMBER,
  INTEGER, BOOLEAN, ARRAY, OBJECT, NULL), ``enum`` a list of strings, ``format`` float/double (NUMBER),
  int32/int64 (INTEGER), enum/date-time (STRING); parameter names ``[A-Za-z_][A-Za-z0-9_]{0,63}``; no
  ``$ref``/``$defs``/``additionalProperties``.
"""

from __future__ import annotations

import re
from typing import Any

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
GEMINI_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
JSON_SCHEMA_TOP_FORBIDDEN = ("oneOf", "anyOf", "allOf", "enum", "not")

STRICT_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}
STRICT_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
STRICT_COMMON = {"type", "description", "enum", "const", "anyOf"}
STRICT_BY_TYPE = {
    "string": {"pattern", "format"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "array": {"items", "minItems", "maxItems"},
    "object": {"properties", "required", "additionalProperties"},
    "boolean": set(),
    "null": set(),
}

GEMINI_FIELDS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}
GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
GEMINI_FORMATS = {"NUMBER": {"float", "double"}, "INTEGER": {"int32", "int64"}, "STRING": {"enum", "date-time"}}


def _walk_json_schema(schema: Any, path: str, problems: list[str]) -> None:
    if isinstance(schema, dict):
        for key in ("$schema", "$ref", "$defs", "definitions"):
            if key in schema:
                problems.append(f"{path}: {key}")
        for value in schema.values():
            _walk_json_schema(value, path + "/", problems)
    elif isinstance(schema, list):
        for value in schema:
            _walk_json_schema(value, path + "/", problems)


def _top_object(schema: Any, where: str) -> list[str]:
    if not isinstance(schema, dict):
        return [f"{where} is not an object"]
    problems = [] if schema.get("type") == "object" else [f"{where}.type is {schema.get('type')!r}, not 'object'"]
    problems += [f"{where} has top-level {k}" for k in JSON_SCHEMA_TOP_FORBIDDEN if k in schema]
    return problems


def check_openai(function: Any) -> list[str]:
    """The problems of an OpenAI (non-strict) ``function`` definition; [] when it is accepted."""
    problems = [] if NAME.match(str(function.get("name"))) else ["name"]
    if "strict" in function and function["strict"] is not False:
        problems.append("strict set on the non-strict definition")
    problems += _top_object(function.get("parameters"), "parameters")
    _walk_json_schema(function.get("parameters"), "parameters", problems)
    return problems


def check_anthropic(tool: Any) -> list[str]:
    problems = [] if NAME.match(str(tool.get("name"))) else ["name"]
    if set(tool) - {"name", "description", "input_schema"}:
        problems.append(f"unknown fields {sorted(set(tool) - {'name', 'description', 'input_schema'})}")
    problems += _top_object(tool.get("input_schema"), "input_schema")
    _walk_json_schema(tool.get("input_schema"), "input_schema", problems)
    return problems


def _strict_node(schema: Any, path: str, level: int, counts: dict[str, int], problems: list[str]) -> None:
    if not isinstance(schema, dict):
        problems.append(f"{path}: not a schema object")
        return
    counts["depth"] = max(counts["depth"], level)
    if "anyOf" in schema:
        if set(schema) - {"anyOf", "description"}:
            problems.append(f"{path}: anyOf beside {sorted(set(schema) - {'anyOf', 'description'})}")
        for i, branch in enumerate(schema["anyOf"]):
            _strict_node(branch, f"{path}/anyOf/{i}", level, counts, problems)
        return
    declared = schema.get("type")
    types = declared if isinstance(declared, list) else [declared]
    if not types or any(t not in STRICT_TYPES for t in types) or len([t for t in types if t != "null"]) > 1:
        problems.append(f"{path}: type {declared!r}")
        return
    allowed = set(STRICT_COMMON)
    for t in types:
        allowed |= STRICT_BY_TYPE[t]
    if set(schema) - allowed:
        problems.append(f"{path}: unsupported keywords {sorted(set(schema) - allowed)}")
    if "format" in schema and schema["format"] not in STRICT_FORMATS:
        problems.append(f"{path}: format {schema['format']!r}")
    if "enum" in schema:
        counts["enum"] += len(schema["enum"])
        if "null" in types and None not in schema["enum"]:
            problems.append(f"{path}: nullable enum without null")
    if "object" in types:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            problems.append(f"{path}: object without properties")
            return
        if schema.get("additionalProperties") is not False:
            problems.append(f"{path}: additionalProperties is not false")
        if sorted(schema.get("required", [])) != sorted(properties):
            problems.append(f"{path}: required is not every property")
        counts["properties"] += len(properties)
        for name, sub in properties.items():
            _strict_node(sub, f"{path}/{name}", level + 1, counts, problems)
    if "array" in types:
        if not isinstance(schema.get("items"), dict):
            problems.append(f"{path}: array without items")
        else:
            _strict_node(schema["items"], f"{path}/items", level + 1, counts, problems)


def check_openai_strict(function: Any) -> list[str]:
    problems = [] if NAME.match(str(function.get("name"))) else ["name"]
    if function.get("strict") is not True:
        problems.append("strict is not true")
    parameters = function.get("parameters")
    problems += _top_object(parameters, "parameters")
    counts = {"properties": 0, "depth": 0, "enum": 0}
    _strict_node(parameters, "parameters", 1, counts, problems)
    if counts["properties"] > 5000 or counts["depth"] > 10 or counts["enum"] > 1000:
        problems.append(f"over strict mode's limits: {counts}")
    return problems


def _gemini_node(schema: Any, path: str, problems: list[str]) -> None:
    if not isinstance(schema, dict):
        problems.append(f"{path}: not a Schema")
        return
    if set(schema) - GEMINI_FIELDS:
        problems.append(f"{path}: fields {sorted(set(schema) - GEMINI_FIELDS)} are not Schema fields")
    kind = schema.get("type")
    if kind is None and "anyOf" not in schema:
        problems.append(f"{path}: no type")
    if kind is not None and kind not in GEMINI_TYPES:
        problems.append(f"{path}: type {kind!r}")
    if "nullable" in schema and not isinstance(schema["nullable"], bool):
        problems.append(f"{path}: nullable")
    if "enum" in schema and not (isinstance(schema["enum"], list) and all(isinstance(v, str) for v in schema["enum"])):
        problems.append(f"{path}: enum of non-strings")
    if "format" in schema and schema["format"] not in GEMINI_FORMATS.get(kind, set()):
        problems.append(f"{path}: format {schema['format']!r} for {kind}")
    for branch in schema.get("anyOf", []):
        _gemini_node(branch, f"{path}/anyOf", problems)
    if "items" in schema:
        _gemini_node(schema["items"], f"{path}/items", problems)
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        problems.append(f"{path}: properties")
        return
    for name, sub in properties.items():
        if not GEMINI_PARAM.match(name):
            problems.append(f"{path}: parameter name {name!r}")
        _gemini_node(sub, f"{path}/{name}", problems)
    if any(r not in properties for r in schema.get("required", [])):
        problems.append(f"{path}: required names a missing property")


def check_gemini(declaration: Any) -> list[str]:
    problems = [] if GEMINI_NAME.match(str(declaration.get("name"))) else ["name"]
    if set(declaration) - {"name", "description", "parameters"}:
        problems.append("unknown FunctionDeclaration fields")
    if "parameters" in declaration:
        parameters = declaration["parameters"]
        if not isinstance(parameters, dict) or parameters.get("type") != "OBJECT":
            problems.append("parameters is not an OBJECT Schema")
        _gemini_node(parameters, "parameters", problems)
    return problems


CHECKERS = {
    "function": check_openai,
    "function_strict": check_openai_strict,
    "anthropic": check_anthropic,
    "gemini": check_gemini,
}


def check_listing(answer: dict[str, Any]) -> list[str]:
    """Every TOOL of a ``list_tools`` answer has all four definitions or a ``warnings`` entry saying why one is
    absent, and every definition passes its family's checker: the problems, [] when none."""
    warned = {(w["server_name"], w["tool_name"], w["family"]) for w in answer.get("warnings", [])}
    problems = []
    for tool in answer["tools"]:
        for family, checker in CHECKERS.items():
            key = (tool["server_name"], tool["tool_name"], family)
            if family not in tool:
                if key not in warned:
                    problems.append(f"{key}: absent without a warning")
                continue
            problems += [f"{key}: {p}" for p in checker(tool[family])]
    return problems


def gemini_as_json_schema(schema: Any) -> Any:
    """A Gemini Schema as the JSON Schema it means (lower-case types, ``nullable`` as a null type), to validate
    arguments against what a Gemini model was told."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            out["type"] = [value.lower(), "null"] if schema.get("nullable") else value.lower()
        elif key == "properties":
            out[key] = {n: gemini_as_json_schema(s) for n, s in value.items()}
        elif key == "items":
            out[key] = gemini_as_json_schema(value)
        elif key == "anyOf":
            out[key] = [gemini_as_json_schema(s) for s in value] + (
                [{"type": "null"}] if schema.get("nullable") else []
            )
        elif key == "enum":
            out[key] = value + ([None] if schema.get("nullable") else [])
        elif key in ("nullable", "format"):
            continue
        else:
            out[key] = value
    return out
