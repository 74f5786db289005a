"""Protocol core (section 5), driven message by message with no I/O: SSE decoding, JSON-RPC framing, the era
table, request/header building (incl. the base64 sentinel), era evidence and result classification.

Seed rows: R01 (versions, JSON/SSE framing), R02 (JSON-RPC errors, malformed results), R04 (input_required,
tasks, URL elicitation). Hypothesis fuzzing: no exception other than BkmcpError subclasses.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bkmcp
from bkmcp import (
    CapabilityUnsupportedError,
    JsonNumber,
    Message,
    ProtocolError,
    SseDecoder,
    SseEvent,
    build_headers,
    build_param_headers,
    build_request,
    check_result,
    classify_discover,
    decode_messages,
    encode_header_value,
    era_rules,
    parse_message,
    parse_www_authenticate,
    rpc_error_exception,
    strip_url_credentials,
)
from tests.helpers import FUZZ_EXAMPLES, object_tool

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_protocol_core_imports_no_io():
    """Section 5 is sans-IO: no httpx, sockets or subprocess (docs/design.md, Code style, the h11 model)."""
    source = open(bkmcp.__file__, encoding="utf-8").read()
    start = source.index("# 5. Protocol core (sans-IO)")
    end = source.index("# 6. Transports")
    core = source[start:end]
    for name in ("httpx", "socket", "subprocess", "asyncio"):
        assert f"import {name}" not in core


# -- SSE decoder ---------------------------------------------------------------------------------------


def feed_all(chunks, decoder=None):
    decoder = decoder or SseDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events, decoder


STREAM = (
    ": keep-alive comment\n"
    "id: ev-0\nretry: 500\ndata: \n\n"  # priming event: empty data, id kept
    'event: message\nid: ev-1\ndata: {"a":\n'
    "data: 1}\n\n"
    "data:no-space\n\n"
)


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_sse_line_ends_and_fields_R01(eol):
    text = STREAM.replace("\n", eol)
    events, decoder = feed_all([text])
    assert events == [SseEvent("message", '{"a":\n1}', "ev-1"), SseEvent("message", "no-space", "ev-1")]
    assert decoder.last_event_id == "ev-1"
    assert decoder.retry_ms == 500


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_sse_every_chunk_split_gives_the_same_events(eol):
    text = STREAM.replace("\n", eol).encode()
    expected, _ = feed_all([text])
    for cut in range(len(text) + 1):
        got, _ = feed_all([text[:cut], text[cut:]])
        assert got == expected, cut
    got, _ = feed_all([bytes([b]) for b in text])
    assert got == expected


def test_sse_crlf_split_between_chunks_is_one_line_end():
    events, _ = feed_all([b"data: x\r", b"\n\r", b"\n"])
    assert events == [SseEvent("message", "x", None)]


def test_sse_utf8_split_inside_a_character():
    payload = "data: 网关\n\n".encode()
    events, _ = feed_all([payload[:8], payload[8:]])
    assert events[0].data == "网关"


def test_sse_priming_event_sets_last_event_id_but_is_not_dispatched():
    events, decoder = feed_all(["id: prime-1\ndata: \n\n"])
    assert events == []
    assert decoder.last_event_id == "prime-1"


def test_sse_unterminated_event_is_discarded_and_bom_stripped():
    events, _ = feed_all(["\ufeffdata: one\n\ndata: two"])
    assert [e.data for e in events] == ["one"]


def test_sse_other_event_types_and_field_without_colon():
    events, _ = feed_all(["event: ping\ndata\ndata: x\nretry: abc\nid: a\x00b\n\n"])
    assert events == [SseEvent("ping", "\nx", None)]


def test_sse_big_event_in_small_chunks_is_linear():
    body = "x" * (4 * 1024 * 1024)
    text = f"data: {body}\n\n".encode()
    decoder = SseDecoder()
    events = []
    for i in range(0, len(text), 4096):
        events.extend(decoder.feed(text[i : i + 4096]))
    assert len(events) == 1 and len(events[0].data) == len(body)


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_fuzz_sse_decoder_never_raises(chunks):
    decoder = SseDecoder()
    for chunk in chunks:
        for event in decoder.feed(chunk):
            assert isinstance(event.data, str) and event.data
    decoder.close()


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("data:id retry:event\r\n{}x1 ")), max_size=200), st.integers(0, 200))
def test_fuzz_sse_split_invariance(text, cut):
    cut = min(cut, len(text))
    whole, _ = feed_all([text])
    split, _ = feed_all([text[:cut], text[cut:]])
    assert whole == split


# -- JSON-RPC framing ----------------------------------------------------------------------------------


def test_parse_message_kinds():
    assert parse_message({"jsonrpc": "2.0", "id": 1, "result": {}}).kind == "result"
    assert parse_message({"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "m"}}).kind == "error"
    assert parse_message({"jsonrpc": "2.0", "id": "p", "method": "ping"}).kind == "request"
    assert parse_message({"jsonrpc": "2.0", "method": "notifications/progress"}).kind == "notification"


@pytest.mark.parametrize(
    "value",
    [
        [],
        "x",
        {"id": 1, "result": {}},
        {"jsonrpc": "1.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "id": 1.5, "result": {}},
        {"jsonrpc": "2.0", "id": None, "result": {}},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}},
        {"jsonrpc": "2.0", "id": 1, "error": "boom"},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": 1}},
        {"jsonrpc": "2.0", "method": 5},
        {"jsonrpc": "2.0", "method": "x", "params": 3},
        {"jsonrpc": "2.0", "id": {}, "method": "x"},
        {"jsonrpc": "2.0"},
    ],
)
def test_parse_message_rejects_wrong_shapes_R02(value):
    with pytest.raises(ProtocolError):
        parse_message(value)


def test_decode_messages_keeps_numbers_exact_and_accepts_batches():
    [msg] = decode_messages(b'{"jsonrpc":"2.0","id":1,"result":{"n":1e400,"i":123456789012345678901234567890}}')
    assert isinstance(msg.result["n"], JsonNumber) and msg.result["n"].text == "1e400"
    assert msg.result["i"] == 123456789012345678901234567890
    batch = decode_messages('[{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":1,"result":{}}]')
    assert [m.kind for m in batch] == ["notification", "result"]
    with pytest.raises(ProtocolError):
        decode_messages("[]")
    with pytest.raises(ProtocolError):
        decode_messages("{not json")


# -- eras and requests ---------------------------------------------------------------------------------


def test_era_table_R01():
    assert [era_rules(v).era for v in bkmcp.SUPPORTED_VERSIONS] == ["legacy", "legacy", "legacy", "legacy", "modern"]
    assert not era_rules("2024-11-05").version_header and era_rules("2024-11-05").handshake
    assert not era_rules("2025-03-26").version_header
    assert era_rules("2025-06-18").version_header and era_rules("2025-11-25").version_header
    modern = era_rules("2026-07-28")
    assert modern.request_meta and modern.method_headers and not modern.handshake and not modern.sessions
    with pytest.raises(ProtocolError):
        era_rules("2024-10-07")


def test_modern_request_carries_meta_and_legacy_does_not():
    modern = build_request(7, "tools/list", {"cursor": "c"}, era_rules("2026-07-28"))
    meta = modern["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
    assert meta["io.modelcontextprotocol/clientInfo"] == {"name": "bkmcp", "version": bkmcp.__version__}
    assert modern["params"]["cursor"] == "c" and modern["id"] == 7
    legacy = build_request(1, "tools/list", None, era_rules("2025-11-25"))
    assert "params" not in legacy


def header_dict(headers):
    return {k.lower(): v for k, v in headers}


def test_headers_per_era():
    configured = {"Authorization": "Bearer t", "X-Custom": "1"}
    msg = build_request(1, "tools/call", {"name": "héllo", "arguments": {}}, era_rules("2026-07-28"))
    modern = header_dict(build_headers(era_rules("2026-07-28"), configured=configured, message=msg))
    assert modern["accept"] == "application/json, text/event-stream"
    assert modern["content-type"] == "application/json"
    assert modern["mcp-protocol-version"] == "2026-07-28"
    assert modern["mcp-method"] == "tools/call"
    assert modern["mcp-name"] == "=?base64?" + base64.b64encode("héllo".encode()).decode() + "?="
    assert modern["authorization"] == "Bearer t" and "mcp-session-id" not in modern
    legacy_msg = build_request(2, "tools/list", None, era_rules("2025-03-26"))
    old = header_dict(build_headers(era_rules("2025-03-26"), configured={}, message=legacy_msg, session_id="s1"))
    assert "mcp-protocol-version" not in old and old["mcp-session-id"] == "s1" and "mcp-method" not in old
    new = header_dict(build_headers(era_rules("2025-06-18"), configured={}, message=legacy_msg, session_id="s1"))
    assert new["mcp-protocol-version"] == "2025-06-18"
    init = header_dict(build_headers(None, configured={}, message=legacy_msg))
    assert "mcp-protocol-version" not in init


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        (42, "42"),
        (True, "true"),
        (False, "false"),
        (None, None),
        (1.5, None),
        ({"a": 1}, None),
        (" lead", "=?base64?IGxlYWQ=?="),
        ("tab\there", "=?base64?" + base64.b64encode(b"tab\there").decode() + "?="),
        ("网关", "=?base64?" + base64.b64encode("网关".encode()).decode() + "?="),
        ("=?base64?abc?=", "=?base64?" + base64.b64encode(b"=?base64?abc?=").decode() + "?="),
    ],
)
def test_header_value_base64_sentinel_rule(value, expected):
    assert encode_header_value(value) == expected


def test_mcp_param_headers_from_x_mcp_header():
    tool = object_tool(
        "t",
        {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limit": {"type": "integer", "x-mcp-header": "Limit"},
            "ratio": {"type": "number", "x-mcp-header": "Ratio"},  # numbers may not be headers
            "bad": {"type": "string", "x-mcp-header": "no spaces"},
            "dup": {"type": "string", "x-mcp-header": "region"},
            "absent": {"type": "string", "x-mcp-header": "Absent"},
        },
    )
    headers = build_param_headers(tool, {"region": "東京", "limit": 5, "ratio": 0.5, "bad": "x", "dup": "y"})
    assert headers == [
        ("Mcp-Param-Region", "=?base64?" + base64.b64encode("東京".encode()).decode() + "?="),
        ("Mcp-Param-Limit", "5"),
    ]
    assert build_param_headers(None, {}) == []


# -- answers -------------------------------------------------------------------------------------------


def result(value, id_=1):
    return Message("result", id=id_, result=value)


def error(code, message="m", data=None):
    err = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return Message("error", id=1, error=err)


@pytest.mark.parametrize(
    ("status", "message", "verdict"),
    [
        (200, result({"supportedVersions": ["2026-07-28"]}), ("modern", "2026-07-28")),
        (200, result({"supportedVersions": ["2025-11-25"]}), ("legacy", None)),
        (200, result({}), ("legacy", None)),
        (200, result([]), ("legacy", None)),
        (400, error(-32022, data={"supported": ["2026-07-28"], "requested": "x"}), ("modern", "2026-07-28")),
        (400, error(-32022, data={"supported": ["2025-11-25"]}), ("legacy", None)),
        (400, error(-32022, data={"supported": ["1999-01-01"]}), ("incompatible", ["1999-01-01"])),
        (404, error(-32601), ("legacy", None)),  # every modern server implements server/discover (n8n-mcp)
        (200, error(-32601), ("legacy", None)),
        (400, error(-32000, "Bad Request: Server not initialized"), ("legacy", None)),
        (400, error(-32600, "Bad Request: Missing session ID"), ("legacy", None)),
        (400, error(-32020), ("legacy", None)),
        (405, None, ("legacy", None)),
        (404, None, ("legacy", None)),
    ],
)
def test_classify_discover_era_evidence_R01(status, message, verdict):
    assert classify_discover(status, message, "2026-07-28") == verdict


def test_classify_discover_retry_on_another_modern_version(monkeypatch):
    monkeypatch.setattr(bkmcp, "MODERN_VERSIONS", ("2026-07-28", "2027-01-01"))
    msg = error(-32022, data={"supported": ["2026-07-28"]})
    assert classify_discover(400, msg, "2027-01-01") == ("retry", "2026-07-28")


def test_check_initialize_result():
    assert bkmcp.check_initialize_result({"protocolVersion": "2025-06-18"}, "2025-11-25") == "2025-06-18"
    with pytest.raises(ProtocolError) as info:
        bkmcp.check_initialize_result({"protocolVersion": "2024-10-07"}, "2025-11-25")
    assert "2024-10-07" in info.value.message and "2025-11-25" in info.value.message
    # the hint names a step that works: pinning cannot make a server speak a version it did not choose
    assert "protocolVersion" not in (info.value.hint or "") and "2024-11-05" in (info.value.hint or "")


def test_2024_11_05_answer_is_spoken_issue36():
    """chroma-mcp 0.2.6 (mcp 1.6.0) answers initialize with 2024-11-05: a subset of 2025-03-26's messages."""
    assert bkmcp.check_initialize_result({"protocolVersion": "2024-11-05"}, "2025-11-25") == "2024-11-05"
    rules = era_rules("2024-11-05")
    assert rules.era == "legacy" and not rules.version_header and not rules.request_meta
    assert build_request(1, "tools/list", None, rules) == {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for bad in ([], {}, {"protocolVersion": 5}):
        with pytest.raises(ProtocolError):
            bkmcp.check_initialize_result(bad, "2025-11-25")


def test_results_complete_and_absent_result_type_are_ok():
    ok = {"content": [], "isError": False}
    assert check_result("tools/call", result(ok)) is ok
    assert check_result("tools/call", result({**ok, "resultType": "complete"}))["resultType"] == "complete"
    assert check_result("tools/list", result({"tools": [{"name": "a"}], "nextCursor": "n"}))


@pytest.mark.parametrize("bad", [{}, {"completion": []}, {"completion": {"values": "a"}}])
def test_a_completion_result_holds_a_values_array(bad):
    """``completion/complete``: ``completion.values`` is an array, else a protocol error (contract §2: Tab then
    offers nothing)."""
    ok = {"completion": {"values": ["a"], "total": 1, "hasMore": False}}
    assert check_result("completion/complete", result(ok)) is ok
    with pytest.raises(ProtocolError, match="completion.values"):
        check_result("completion/complete", result(bad))


def test_input_required_is_capability_unsupported_with_raw_result_R04():
    raw = {
        "resultType": "input_required",
        "inputRequests": {"k": {"method": "elicitation/create", "params": {}}},
        "requestState": "s",
    }
    with pytest.raises(CapabilityUnsupportedError) as info:
        check_result("tools/call", result(raw))
    assert info.value.data == {"result": raw}
    assert info.value.details["input_requests"] == ["elicitation/create"]


@pytest.mark.parametrize(
    "raw",
    [
        {"resultType": "task", "taskId": "t-1", "status": "working"},
        {"task": {"taskId": "t-1", "status": "working"}},
    ],
)
def test_tasks_are_capability_unsupported_keeping_the_task_id_R04(raw):
    with pytest.raises(CapabilityUnsupportedError) as info:
        check_result("tools/call", result(raw))
    assert info.value.details["task_id"] == "t-1"
    assert info.value.data == {"result": raw}


def test_url_elicitation_error_keeps_urls_R04():
    data = {"elicitations": [{"mode": "url", "elicitationId": "e", "url": "https://a.example/x", "message": "m"}]}
    err = rpc_error_exception("tools/call", {"code": -32042, "message": "needs url", "data": data})
    assert isinstance(err, CapabilityUnsupportedError) and err.details["urls"] == ["https://a.example/x"]


def test_rpc_error_keeps_code_message_data_R02():
    err = rpc_error_exception("tools/call", {"code": -32602, "message": "Unknown tool", "data": {"x": 1}})
    assert isinstance(err, ProtocolError)
    assert err.details["rpc_error"] == {"code": -32602, "message": "Unknown tool", "data": {"x": 1}}
    with pytest.raises(ProtocolError):
        check_result("tools/list", error(-32603))


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "text",
        {"resultType": "mystery", "content": []},
        {"resultType": 5, "content": []},
        {"content": "not a list"},
        {"content": [], "isError": "yes"},
    ],
)
def test_malformed_call_results_are_protocol_errors_R02(raw):
    with pytest.raises(ProtocolError):
        check_result("tools/call", result(raw))


@pytest.mark.parametrize(
    "raw", [{}, {"tools": {}}, {"tools": [1]}, {"tools": [{"name": 3}]}, {"tools": [], "nextCursor": 5}]
)
def test_malformed_list_results_are_protocol_errors(raw):
    with pytest.raises(ProtocolError):
        check_result("tools/list", result(raw))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
message_like = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans(), st.floats()),
        "method": st.one_of(st.text(max_size=10), st.integers()),
        "params": json_values,
        "result": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "resultType": st.sampled_from(["complete", "input_required", "task", "x", 1]),
                "content": json_values,
                "tools": json_values,
                "task": json_values,
                "isError": json_values,
                "nextCursor": json_values,
            },
        ),
        "error": json_values
        | st.fixed_dictionaries(
            {"code": st.integers(-33000, 0), "message": st.text(max_size=5)}, optional={"data": json_values}
        ),
    },
)


@FUZZ
@given(
    message_like, st.sampled_from(["tools/call", "tools/list", "server/discover", "initialize"]), st.integers(100, 599)
)
def test_fuzz_classification_raises_only_bkmcp_errors_R02(value, method, status):
    try:
        msg = parse_message(value)
        classify_discover(status, msg, "2026-07-28")
        check_result(method, msg)
    except bkmcp.BkmcpError:
        pass


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_fuzz_decode_messages_raises_only_protocol_errors(raw):
    try:
        decode_messages(raw)
    except ProtocolError:
        pass


def test_huge_fields_are_clipped_in_error_messages():
    err = rpc_error_exception("tools/call", {"code": -1, "message": "x" * 100000})
    assert len(err.message) < 1000


# -- auth / location helpers ---------------------------------------------------------------------------


def test_parse_www_authenticate_A04():
    params = parse_www_authenticate(
        'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", '
        'scope="files:read files:write", error="invalid_token", error_description="The token \\"expired\\""'
    )
    assert params == {
        "scheme": "Bearer",
        "resource_metadata": "https://mcp.example.com/.well-known/oauth-protected-resource",
        "scope": "files:read files:write",
        "error": "invalid_token",
        "error_description": 'The token "expired"',
    }
    assert parse_www_authenticate("") == {}
    assert parse_www_authenticate("Basic realm=x")["realm"] == "x"


def test_strip_url_credentials_A04():
    assert strip_url_credentials("https://user:pw@host.example:8443/p/a?token=s#f") == "https://host.example:8443/p/a"
    assert strip_url_credentials("http://[::1]/x") == "http://[::1]/x"
