"""One checker per model family for the definitions the resident hands a platform (docs/resident.md, "Definitions
for each model family"). Each encodes its family's own official, machine-readable definition (read on 2026-12-04,
commits named below) independently of bkmcp's shaping code (it shares no code with it). A rule the official
definition does not settle is marked "(bkmcp's rule)": bkmcp's definitions keep it, to stay inside what the API's
guide pages and peers' reports say is accepted, and docs/resident.md says so.

- OpenAI: openai/openai-openapi ``openapi.yaml`` at f85dbe223d40e1a31cba812ab2d755c7e98a92a3 (2026-08-21),
  ``FunctionObject``: ``name`` "a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length of 64",
  ``parameters`` (``FunctionParameters``) "a JSON Schema object", ``strict`` a boolean ("Only a subset of JSON
  Schema is supported when strict is true", the subset only linked to the guide). (bkmcp's rule, from
  https://platform.openai.com/docs/guides/function-calling and the 400s peers report: the top level is
  ``type: object`` without ``oneOf``/``anyOf``/``allOf``/``enum``/``not``; no ``$schema``/``$ref``/``$defs``.)
- OpenAI strict: the spec does not list the subset; these rules are bkmcp's, from
  https://platform.openai.com/docs/guides/structured-outputs#supported-schemas: the root is an object, not
  ``anyOf``; every object has ``additionalProperties: false`` and lists every property in ``required``; types
  string, number, integer, boolean, object, array, null (and ``anyOf``, ``enum``, ``const``); supported keywords
  only (string: pattern, format of date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid;
  number/integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf; array: minItems, maxItems); at
  most 5000 properties, 10 levels of nesting, 1000 enum values. OpenAI's own strict converters, read on
  2026-12-04, agree with every rule they touch: openai/openai-node ``src/lib/transform.ts`` at
  7b7d6ca71130d37ec09792c50056b47861f2eccf (2026-08-21; ``toStrictJsonSchema``: root a non-union object,
  ``additionalProperties`` false and nothing else, every property required, arrays need ``items``, rejects
  ``allOf`` it cannot merge, ``oneOf``, ``uniqueItems``, ``minProperties``/``maxProperties``, ``prefixItems``,
  ``if``/``then``/``else``, ``not``, ``patternProperties`` and the other ``JSON_SCHEMA_UNSUPPORTED_SCHEMA_KEYWORDS``),
  openai/openai-agents-python ``src/agents/strict_schema.py`` and ``tests/test_strict_schema.py`` at
  7f7a44f8dc0650296bd5ab6c745c9bcbaa6ac3b7 (2026-08-22; non-nullable object root, no root ``anyOf``,
  ``additionalProperties`` true or ``{}`` refused) and openai/openai-python ``src/openai/lib/_pydantic.py`` at
  e43b422412a9e96c9cc5192c61fffbe2d7e04836 (2026-08-21). They do not settle the formats, ``minLength``/
  ``maxLength``, ``default``, ``title`` (passed through, never said accepted) or the size limits, so this
  checker keeps the guide's narrower list; they do keep ``$ref``/``$defs``, which it rejects (bkmcp inlines).
- Anthropic: anthropics/anthropic-sdk-python ``src/anthropic/types/tool_param.py`` at
  009b035305e0724ce108ebd796935f91711fc6e1 (2026-08-07), generated from Anthropic's OpenAPI spec: ``ToolParam``
  has ``name`` and ``input_schema`` (required) and ``allowed_callers``, ``cache_control``, ``defer_loading``,
  ``description``, ``eager_input_streaming``, ``input_examples``, ``strict``, ``type``; ``InputSchema`` is JSON
  Schema 2020-12 with ``type: "object"`` required, ``properties`` a map, ``required`` a list of strings, other keys
  allowed. (bkmcp's rule: ``name`` ``^[a-zA-Z0-9_-]{1,64}$``, no top-level ``oneOf``/``anyOf``/``allOf``, no
  ``$schema``/``$ref``/``$defs``; the SDK states no name pattern.)
- Gemini: googleapis/googleapis ``google/ai/generativelanguage/v1beta/content.proto`` at
  bc7e3baa28fbb223fa93782e130260fab8205bfc (2025-12-18; unchanged at the snapshot f8291d2b of 2026-08-22; the v1
  directory has no function calling): ``FunctionDeclaration`` fields name, description (both REQUIRED),
  parameters, parametersJsonSchema (mutually exclusive), response, responseJsonSchema, behavior; ``name`` "a-z,
  A-Z, 0-9, or contain underscores, colons, dots, and dashes, with a maximum length of 64"; ``Schema`` fields
  type (the ``Type`` enum STRING, NUMBER, INTEGER, BOOLEAN, ARRAY, OBJECT, NULL), format ("Any value is allowed"),
  title, description, nullable, enum ("Possible values of the element of Type.STRING"), items, maxItems, minItems,
  properties, required, minProperties, maxProperties, minimum, maximum, minLength, maxLength, pattern, example,
  anyOf, propertyOrdering, default. (bkmcp's rule: parameter names ``[A-Za-z_][A-Za-z0-9_]{0,63}``, the proto
  only says they are case sensitive. Not settled: ``type`` is marked REQUIRED beside ``anyOf`` alternatives of
  different types; a node with ``anyOf`` and no ``type`` is accepted here, as Google's own SDK sends it:
  googleapis/python-genai ``google/genai/_transformers.py`` ``process_schema`` at
  66807187f2123c6676175ac991f4e34eb09200d1 (2026-08-21) returns an ``anyOf`` node without adding a ``type``.
  ``description`` REQUIRED: a proto3 string left empty is unset (AIP-203), so it must not be empty.)
"""

from __future__ import annotations

import re
from typing import Any

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_NAME = re.compile(r"^[a-zA-Z0-9_:.-]{1,64}$")
ANTHROPIC_TOOL_FIELDS = {"name", "input_schema", "allowed_callers", "cache_control", "defer_loading", "description"}
ANTHROPIC_TOOL_FIELDS |= {"eager_input_streaming", "input_examples", "strict", "type"}
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
GEMINI_FOR_TYPES = {  # content.proto: "... of Type.ARRAY", "... of Type.OBJECT", "... of the Type.STRING", ...
    "items": {"ARRAY"},
    "minItems": {"ARRAY"},
    "maxItems": {"ARRAY"},
    "properties": {"OBJECT"},
    "required": {"OBJECT"},
    "minProperties": {"OBJECT"},
    "maxProperties": {"OBJECT"},
    "minimum": {"INTEGER", "NUMBER"},
    "maximum": {"INTEGER", "NUMBER"},
    "minLength": {"STRING"},
    "maxLength": {"STRING"},
    "pattern": {"STRING"},
}
GEMINI_INT64 = ("minItems", "maxItems", "minProperties", "maxProperties", "minLength", "maxLength")
GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
GEMINI_DECLARATION_FIELDS = {"name", "description", "parameters", "parametersJsonSchema", "response"}
GEMINI_DECLARATION_FIELDS |= {"responseJsonSchema", "behavior"}


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
    if set(tool) - ANTHROPIC_TOOL_FIELDS:
        problems.append(f"unknown fields {sorted(set(tool) - ANTHROPIC_TOOL_FIELDS)}")
    if "description" in tool and not isinstance(tool["description"], str):
        problems.append("description is not a string")
    problems += _top_object(tool.get("input_schema"), "input_schema")
    schema = tool.get("input_schema")
    if isinstance(schema, dict) and not isinstance(schema.get("properties", {}), (dict, type(None))):
        problems.append("input_schema.properties is not a map")
    if isinstance(schema, dict) and not all(isinstance(r, str) for r in schema.get("required") or []):
        problems.append("input_schema.required is not a list of strings")
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
    if "enum" in schema and kind != "STRING":
        problems.append(f"{path}: enum on {kind}, not STRING")
    for key in set(schema) & set(GEMINI_FOR_TYPES):
        if kind not in GEMINI_FOR_TYPES[key]:
            problems.append(f"{path}: {key} on {kind}")
    for key in set(schema) & set(GEMINI_INT64):  # int64: a JSON integer (or its decimal string)
        if isinstance(schema[key], bool) or not isinstance(schema[key], (int, str)) or not str(schema[key]).isdigit():
            problems.append(f"{path}: {key} {schema[key]!r} is not an int64")
    for key in set(schema) & {"minimum", "maximum"}:
        if isinstance(schema[key], bool) or not isinstance(schema[key], (int, float)):
            problems.append(f"{path}: {key} {schema[key]!r} is not a double")
    if "pattern" in schema and not isinstance(schema["pattern"], str):
        problems.append(f"{path}: pattern {schema['pattern']!r} is not a string")
    if "format" in schema and not isinstance(schema["format"], str):
        problems.append(f"{path}: format {schema['format']!r}")
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
    if set(declaration) - GEMINI_DECLARATION_FIELDS:
        problems.append(f"unknown FunctionDeclaration fields {sorted(set(declaration) - GEMINI_DECLARATION_FIELDS)}")
    if not isinstance(declaration.get("description"), str) or not declaration["description"]:
        problems.append("description (REQUIRED) is not a non-empty string")
    if "parameters" in declaration and "parametersJsonSchema" in declaration:
        problems.append("parameters beside parametersJsonSchema")
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
