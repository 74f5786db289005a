"""The HTTP registry source (contract.md §11.3) against the reference implementation ``mock_server/registry_source.py``
over real HTTP on 127.0.0.1, and registry rows resolved for a user reaching real MCP servers (the mock over HTTP
and over stdio): assertions are on what the registry source and the MCP servers received.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import bkmcp
from mock_server.mcp_mock import MockServer, mock_tool
from mock_server.registry_source import RegistrySource
from tests.helpers import ROOT, run_bkmcp

TOKEN_A = "SENTINEL-jwt-alice-0001"
TOKEN_B = "SENTINEL-jwt-bob-0002"
SECRET_A = "SENTINEL-cred-alice-3333"
SECRET_B = "SENTINEL-cred-bob-4444"
SECRET_SYS = "SENTINEL-cred-system-5555"
SECRETS = (TOKEN_A, TOKEN_B, SECRET_A, SECRET_B, SECRET_SYS)
MOCK = str(ROOT / "mock_server" / "mcp_mock.py")


def document(mcp_url: str = "http://127.0.0.1:9/mcp") -> dict[str, Any]:
    return {
        "servers": [
            {"name": "public-docs", "transport_type": "http", "url": mcp_url, "headers": {"X-Team": "core"}},
            {
                "name": "gitea",
                "transport_type": "http",
                "url": mcp_url,
                "isolation": "user",
                "headers": '{"X-User-Token": "${user.token}"}',
                "enabled": True,
            },
            {"name": "off", "transport_type": "http", "url": mcp_url, "enabled": False},
            {"name": "weird", "transport_type": "sse", "url": mcp_url},
            {"name": "badtext", "transport_type": "stdio", "command": "x", "args": "[oops", "isolation": "user"},
            "not an object",
            {"transport_type": "http"},
        ],
        "system_credentials": {"public-docs": {"API_KEY": SECRET_SYS}, "gitea": {"token": SECRET_SYS}},
        "user_credentials": {
            "alice": {"gitea": {"token": SECRET_A}},
            "bob": {"gitea": json.dumps({"token": SECRET_B})},
        },
        "tokens": {"alice": TOKEN_A, "bob": TOKEN_B},
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def source():
    src = RegistrySource(document())
    src.start()
    yield src
    src.stop()


def make(src: RegistrySource, **kwargs: Any) -> tuple[bkmcp.HttpRegistry, io.StringIO]:
    stream = io.StringIO()
    registry = bkmcp.HttpRegistry(src.url, log=bkmcp.Log(stream, verbose=True), timeout=10, **kwargs)
    return registry, stream


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_per_user_request_carries_the_users_bearer_token_and_user_id(source: RegistrySource) -> None:
    registry, stream = make(source)
    alice = registry.view("alice", TOKEN_A)
    bob = registry.view("bob", TOKEN_B)
    (a, b) = source.requests()
    assert a["path"] == "/internal/mcp/config?user_id=alice" and a["headers"]["authorization"] == f"Bearer {TOKEN_A}"
    assert b["user_id"] == "bob" and b["headers"]["authorization"] == f"Bearer {TOKEN_B}"
    assert alice.user_credentials == {"gitea": {"token": SECRET_A}}
    assert bob.user_credentials == {"gitea": {"token": SECRET_B}}  # JSON text or value, both accepted
    assert alice.system_credentials["gitea"] == {"token": SECRET_SYS}
    assert set(alice.servers) == {"public-docs", "gitea", "off", "weird", "badtext"}
    assert "ignored" in stream.getvalue()  # the non-object and the nameless rows
    no_secret(stream.getvalue())
    registry.close()


def test_no_user_request_has_no_user_id_and_no_authorization(source: RegistrySource) -> None:
    registry, _ = make(source)
    view = registry.view(None, TOKEN_A)  # a token without a user is never sent
    (entry,) = source.requests()
    assert entry["path"] == "/internal/mcp/config" and "authorization" not in entry["headers"]
    assert set(view.servers) == {"public-docs", "off", "weird"} and view.user_credentials == {}
    assert view.system_credentials == {"public-docs": {"API_KEY": SECRET_SYS}}
    registry.close()


def test_user_ids_are_query_encoded(source: RegistrySource) -> None:
    source.update({**document(), "tokens": {"a&b=c d/é": TOKEN_A}})
    registry, _ = make(source)
    registry.view("a&b=c d/é", TOKEN_A)
    (entry,) = source.requests()
    assert entry["user_id"] == "a&b=c d/é" and "&b=" not in entry["path"]
    registry.close()


def test_bad_rows_are_isolated(source: RegistrySource) -> None:
    registry, _ = make(source)
    view = registry.view("alice", TOKEN_A)
    assert view.servers["weird"].problem is not None and view.servers["weird"].problem.code == "invalid_mcp_config"
    assert "not valid JSON" in view.servers["badtext"].problem.message  # type: ignore[union-attr]
    assert view.servers["gitea"].problem is None and view.servers["public-docs"].problem is None
    with pytest.raises(bkmcp.ServerDisabledError):
        bkmcp.resolve_registry_server(view.servers["off"], view=view, user_id="alice", env={})
    registry.close()


@pytest.mark.parametrize(
    "token, status, error",
    [
        (None, 401, bkmcp.AuthRequiredError),
        ("SENTINEL-wrong-token-9999", 401, bkmcp.AuthRequiredError),
        (TOKEN_B, 403, bkmcp.PermissionDeniedError),  # bob's token for alice
    ],
)
def test_401_and_403_map_to_auth_errors_for_that_command(source: RegistrySource, token, status, error) -> None:
    registry, stream = make(source)
    with pytest.raises(error) as info:
        registry.view("alice", token)
    assert info.value.details["http_status"] == status
    no_secret(info.value.message, str(info.value.hint), stream.getvalue(), "SENTINEL-wrong-token-9999")
    assert "SENTINEL-wrong-token-9999" not in info.value.message
    assert registry.view("alice", TOKEN_A).user_credentials  # the next command with a good token works
    assert len(source.requests("alice")) == 2  # failures are not cached
    registry.close()


@pytest.mark.parametrize(
    "fault, message",
    [
        ({"status": 500}, "HTTP 500"),
        ({"status": 404}, "HTTP 404"),
        ({"body": "{not json"}, "valid JSON"),
        ({"body": "[1, 2]"}, '"servers"'),
        ({"body": '{"servers": [], "system_credentials": []}'}, "must be objects"),
    ],
)
def test_other_failures_are_registry_errors_naming_the_source(source: RegistrySource, fault, message) -> None:
    source.update(fault=fault)
    registry, _ = make(source)
    with pytest.raises(bkmcp.RegistryError) as info:
        registry.view("alice", TOKEN_A)
    assert info.value.code == "registry_error" and message in info.value.message
    assert f"127.0.0.1:{source.port}/internal/mcp/config" in info.value.message
    no_secret(info.value.message)
    registry.close()


def test_redirects_are_never_followed(source: RegistrySource) -> None:
    with RegistrySource(document()) as elsewhere:
        source.update(fault={"redirect": elsewhere.url + "?token=" + SECRET_SYS})
        registry, _ = make(source)
        with pytest.raises(bkmcp.RegistryError, match="redirect") as info:
            registry.view("alice", TOKEN_A)
        assert elsewhere.requests() == []
        assert f"127.0.0.1:{elsewhere.port}" in info.value.message
        no_secret(info.value.message)
        registry.close()


def test_unreachable_and_slow_sources(source: RegistrySource) -> None:
    port = source.port
    source.stop()
    registry = bkmcp.HttpRegistry(
        f"http://127.0.0.1:{port}/internal/mcp/config", log=bkmcp.Log(io.StringIO()), timeout=5
    )
    with pytest.raises(bkmcp.RegistryError, match="cannot read"):
        registry.view("alice", TOKEN_A)
    registry.close()
    with RegistrySource(document()) as slow:
        slow.update(fault={"delay_ms": 3000})
        registry = bkmcp.HttpRegistry(slow.url, log=bkmcp.Log(io.StringIO()), timeout=0.3)
        with pytest.raises(bkmcp.RegistryError, match="did not answer within 300ms"):
            registry.view("alice", TOKEN_A)
        registry.close()


def test_invalid_access_token_is_never_sent(source: RegistrySource) -> None:
    registry, _ = make(source)
    with pytest.raises(bkmcp.AuthRequiredError, match="not a valid header value"):
        registry.view("alice", "abc\r\nX-Evil: 1")
    assert source.requests() == []
    registry.close()


def test_answers_are_cached_per_user_and_token_for_a_short_time(source: RegistrySource) -> None:
    clock = Clock()
    registry, _ = make(source, clock=clock, cache_seconds=5)
    for _ in range(3):
        registry.view("alice", TOKEN_A)
        registry.view(None, None)
    assert len(source.requests("alice")) == 1 and len(source.requests(None)) == 1
    registry.view("bob", TOKEN_B)
    assert len(source.requests("bob")) == 1
    with pytest.raises(bkmcp.AuthRequiredError):  # another token for alice is a new request, never the cached answer
        registry.view("alice", "SENTINEL-other-token")
    assert len(source.requests("alice")) == 2
    source.update({**document(), "servers": []})
    clock.now += 4.9
    assert registry.view("alice", TOKEN_A).servers  # still cached
    clock.now += 0.2
    assert registry.view("alice", TOKEN_A).servers == {}  # expired: re-read
    assert len(source.requests("alice")) == 3
    registry.close()


def test_concurrent_views_from_20_threads(source: RegistrySource) -> None:
    """20 threads asking for one user share one request; 20 users get 20 requests, each with its own token."""
    source.update(fault={"delay_ms": 200})  # keep the first request in flight while the others arrive
    tokens = {f"user{i}": f"SENTINEL-jwt-{i:04d}" for i in range(20)}
    source.update({**document(), "tokens": {**document()["tokens"], **tokens}})
    registry, _ = make(source)
    results: list[Any] = []
    barrier = threading.Barrier(20)

    def same_user() -> None:
        barrier.wait(timeout=30)
        results.append(registry.view("alice", TOKEN_A))

    threads = [threading.Thread(target=same_user) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 20 and all(r.user_credentials == {"gitea": {"token": SECRET_A}} for r in results)
    assert len(source.requests("alice")) == 1
    errors: list[BaseException] = []

    def each_user(user: str) -> None:
        try:
            barrier.wait(timeout=30)
            registry.view(user, tokens[user])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=each_user, args=(u,)) for u in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    seen = {e["user_id"]: e["headers"]["authorization"] for e in source.requests() if e["user_id"] in tokens}
    assert seen == {u: f"Bearer {t}" for u, t in tokens.items()}
    registry.close()


def test_concurrent_callers_share_a_failure_without_waiting_for_retries(source: RegistrySource) -> None:
    source.update(fault={"delay_ms": 200, "status": 503})
    registry, _ = make(source)
    errors: list[BaseException] = []
    barrier = threading.Barrier(10)

    def call() -> None:
        barrier.wait(timeout=30)
        try:
            registry.view("alice", TOKEN_A)
        except bkmcp.BkmcpError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(errors) == 10 and all(isinstance(e, bkmcp.RegistryError) for e in errors)
    assert len({id(e) for e in errors}) == 10  # each caller raises its own exception object
    assert len(source.requests("alice")) < 10
    registry.close()


def test_tools_cache_is_in_memory_per_user(source: RegistrySource) -> None:
    registry, _ = make(source)
    view = registry.view("alice", TOKEN_A)
    registry.store_tools(view.servers["gitea"], "alice", [{"name": "a"}], "2025-11-25")
    registry.store_tools(view.servers["public-docs"], "alice", [{"name": "p"}], None)
    assert registry.load_tools(view.servers["gitea"], "bob") is None
    cached = registry.load_tools(view.servers["gitea"], "alice")
    assert cached is not None and cached.tools == [{"name": "a"}]
    assert cached.protocol_version == "2025-11-25" and cached.fetched_at > 0
    assert registry.load_tools(view.servers["public-docs"], "bob").tools == [{"name": "p"}]  # type: ignore[union-attr]
    assert len(source.requests()) == 1
    registry.close()


def test_open_registry_picks_the_source_by_its_form(source: RegistrySource, tmp_path: Path) -> None:
    log = bkmcp.Log(io.StringIO())
    http = bkmcp.open_registry(source.url, env={}, log=log, timeout=5)
    assert isinstance(http, bkmcp.HttpRegistry) and http.source == f"registry {source.url}"
    http.close()
    sqlite = bkmcp.open_registry(str(tmp_path / "r.db"), env={}, log=log, timeout=5)
    assert isinstance(sqlite, bkmcp.SqliteRegistry)
    sqlite.close()


# -- rows resolved for a user reach real MCP servers ------------------------------------------------------------


def test_resolved_http_rows_send_each_users_credentials_to_the_mcp_server(source: RegistrySource) -> None:
    with MockServer({"versions": ["2025-11-25"]}) as mcp:
        source.update(document(mcp.url))
        registry, stream = make(source)
        sent: dict[str, str] = {}
        for user, token, secret in (
            ("alice", TOKEN_A, SECRET_A),
            ("bob", TOKEN_B, SECRET_B),
            ("carol", None, SECRET_SYS),
        ):
            if user == "carol":
                source.update({**document(mcp.url), "tokens": {**document()["tokens"], "carol": "SENTINEL-c"}})
                token = "SENTINEL-c"
            view = registry.view(user, token)
            server = bkmcp.resolve_registry_server(view.servers["gitea"], view=view, user_id=user, env={})
            log = bkmcp.Log(stream, verbose=True, redactor=server.redactor)
            mcp.reset_log()
            data = bkmcp.run_tools(server, bkmcp.OpContext(bkmcp.Deadline(20), log), insecure=False)
            assert data["tool_count"] >= 1
            received = {e["headers"].get("x-user-token") for e in mcp.log}
            auth = {e["headers"].get("authorization") for e in mcp.log}
            assert received == {secret} and auth == {f"Bearer {secret}"}  # token -> Authorization too (§11.4)
            sent[user] = secret
        assert sent == {"alice": SECRET_A, "bob": SECRET_B, "carol": SECRET_SYS}  # carol: the system default
        public_view = registry.view(None, None)
        public = bkmcp.resolve_registry_server(
            public_view.servers["public-docs"], view=public_view, user_id=None, env={}
        )
        mcp.reset_log()
        bkmcp.run_tools(public, bkmcp.OpContext(bkmcp.Deadline(20), bkmcp.Log(stream, verbose=True)), insecure=False)
        assert {e["headers"].get("x-api-key") for e in mcp.log} == {SECRET_SYS}
        assert {e["headers"].get("x-team") for e in mcp.log} == {"core"}
        no_secret(stream.getvalue())
        registry.close()


def test_resolved_stdio_row_gives_the_child_the_users_env(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(
        json.dumps({"tools": [mock_tool("show_env", "env", vars=["API_KEY", "FROM_RESIDENT", "LEAK"])]})
    )
    doc = {
        "servers": [
            {
                "name": "fs",
                "transport_type": "stdio",
                "command": sys.executable,
                "isolation": "user",
                "args": [MOCK, "--stdio", "--quiet", "--scenario", str(scenario)],
                "env_template": {"API_KEY": "${user.API_KEY}", "FROM_RESIDENT": "${RESIDENT_VAR}"},
            }
        ],
        "user_credentials": {"alice": {"fs": {"API_KEY": SECRET_A}}},
        "tokens": {"alice": TOKEN_A},
    }
    with RegistrySource(doc) as src:
        registry, stream = make(src)
        view = registry.view("alice", TOKEN_A)
        env = {"PATH": "/usr/bin:/bin", "RESIDENT_VAR": "resident-value", "LEAK": "never-inherited"}
        server = bkmcp.resolve_registry_server(view.servers["fs"], view=view, user_id="alice", env=env)
        log = bkmcp.Log(stream, verbose=True, redactor=server.redactor)
        ctx = bkmcp.OpContext(bkmcp.Deadline(30), log)
        session = bkmcp.open_session(server, ctx, insecure=False)
        try:
            bkmcp.discover_tools(session, ctx)
            result = bkmcp.call_tool(session, ctx, "show_env", {})
        finally:
            session.close(ctx.deadline)
        assert result["structuredContent"]["env"] == {
            "API_KEY": SECRET_A,
            "FROM_RESIDENT": "resident-value",
            "LEAK": None,
        }
        no_secret(stream.getvalue())
        registry.close()


def test_reference_source_runs_as_a_script_with_a_request_log(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document()))
    log_file = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "mock_server" / "registry_source.py"),
            "--port",
            "0",
            "--config",
            str(path),
            "--log",
            str(log_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("LISTENING http://127.0.0.1:")
        url = line.split()[1]
        registry = bkmcp.HttpRegistry(url, log=bkmcp.Log(io.StringIO()), timeout=10)
        assert "gitea" in registry.view("alice", TOKEN_A).servers
        path.write_text(json.dumps({**document(), "servers": []}))  # re-read on every request
        assert registry.view("bob", TOKEN_B).servers == {}
        registry.close()
        base = url.rsplit("/internal/", 1)[0]
        with urllib.request.urlopen(base + "/__log", timeout=10) as answer:
            entries = json.loads(answer.read())
        assert [e["user_id"] for e in entries] == ["alice", "bob"]
        assert entries[0]["headers"]["authorization"] == f"Bearer {TOKEN_A}"
        with urllib.request.urlopen(urllib.request.Request(base + "/__reset", method="POST"), timeout=10):
            pass
        with urllib.request.urlopen(base + "/__log", timeout=10) as answer:
            assert json.loads(answer.read()) == []
        assert len(log_file.read_text().splitlines()) == 2
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def test_a_row_without_transport_type_is_a_stdio_server(source: RegistrySource) -> None:
    """Issue 17 item 4 (contract §11.3): an HTTP-source row without transport_type is stdio; list_servers never
    shows "None"."""
    source.update(
        {
            "servers": [{"name": "plain", "command": sys.executable, "args": [MOCK, "--stdio", "--quiet"]}],
            "system_credentials": {},
            "user_credentials": {},
            "tokens": {},
        }
    )
    lines = '{"command":"invoke","task_id":"t1","params":{"action":"list_servers"}}\n'
    res = run_bkmcp("--resident", "--registry", source.url, stdin=lines)
    assert res.exit_status == 0, res.stderr
    (answer,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert answer["success"] is True, answer
    assert [(s["server_name"], s["transport_type"]) for s in answer["result"]["servers"]] == [("plain", "stdio")]
    assert "None" not in res.stdout
