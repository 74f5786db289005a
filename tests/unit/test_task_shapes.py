"""The pure parts of tasks (docs/contract.md §5 "Tasks"): who runs a call as a task in each era, the two shapes of
a created task, the handle, the poll delay's bounds, and the local handle store (its mode, its pruning, a file
that is not JSON)."""

from __future__ import annotations

import json
import os
import stat

import pytest

import bkmcp

LEGACY_CAPS = {"tasks": {"requests": {"tools": {"call": {}}}}}
MODERN_CAPS = {"extensions": {bkmcp.TASKS_EXTENSION: {}}}


def tool(support: object = None) -> dict:
    return {"name": "t", **({"execution": {"taskSupport": support}} if support is not None else {})}


@pytest.mark.parametrize(
    ("era", "caps", "support", "wanted", "expected"),
    [
        ("legacy", LEGACY_CAPS, "optional", False, False),
        ("legacy", LEGACY_CAPS, "optional", True, True),
        ("legacy", LEGACY_CAPS, "required", False, True),
        ("legacy", LEGACY_CAPS, None, False, False),
        ("legacy", LEGACY_CAPS, "forbidden", False, False),
        ("legacy", {}, None, False, False),
        ("modern", MODERN_CAPS, None, False, True),  # offered: always declared, the server decides
        ("modern", None, None, False, False),  # pinned: capabilities never read
        ("modern", None, None, True, True),
        ("modern", None, "required", False, True),
        ("modern", {}, None, False, False),
    ],
)
def test_who_runs_a_call_as_a_task(era, caps, support, wanted, expected):
    assert bkmcp.decide_task(era, caps, tool(support), wanted, "s") is expected


@pytest.mark.parametrize(
    ("era", "caps", "support", "wanted", "why"),
    [
        ("legacy", {}, "required", False, "does not declare capabilities.tasks.requests.tools.call"),
        ("legacy", {}, "optional", True, "does not declare capabilities.tasks.requests.tools.call"),
        ("legacy", LEGACY_CAPS, "forbidden", True, "execution.taskSupport forbidden"),
        ("legacy", LEGACY_CAPS, None, True, "execution.taskSupport absent"),
        ("modern", {}, None, True, "does not offer the io.modelcontextprotocol/tasks extension"),
        ("modern", {}, "required", False, "does not offer the io.modelcontextprotocol/tasks extension"),
    ],
)
def test_a_task_that_cannot_run_is_refused_unsent(era, caps, support, wanted, why):
    with pytest.raises(bkmcp.CapabilityUnsupportedError) as caught:
        bkmcp.decide_task(era, caps, tool(support), wanted, "s")
    error = caught.value
    assert why in error.message and "nothing was sent" in error.message
    assert error.details["outcome"] == "not_sent" and error.request_sent is False
    assert error.data == {"server": "s", "tool": "t"}


def test_the_two_shapes_of_a_created_task_and_its_handle():
    modern = {"resultType": "task", "taskId": "a", "status": "working", "ttlMs": 5000, "pollIntervalMs": 250}
    legacy = {"task": {"taskId": "b", "status": "working", "ttl": None, "pollInterval": 1000, "createdAt": "T"}}
    assert bkmcp.parse_created_task(modern, "modern") == modern
    assert bkmcp.parse_created_task(legacy, "legacy") == legacy["task"]
    assert bkmcp.parse_created_task({"content": []}, "legacy") is None
    assert bkmcp.parse_created_task(legacy, "modern") is None  # the extension's shape only
    with pytest.raises(bkmcp.ProtocolError, match="malformed task"):
        bkmcp.parse_created_task({"resultType": "task", "status": "working"}, "modern")
    handle = bkmcp.build_task_handle(
        {**legacy["task"], "statusMessage": "go\x1b[2J"}, server="s", tool="t", era="legacy", version="v",
        transport="http",
    )  # fmt: skip
    assert handle["mcp_task_id"] == "b" and handle["ttl_ms"] is None and handle["poll_interval_ms"] == 1000
    assert "\x1b" not in handle["status_message"] and handle["created_at"] == "T"
    assert bkmcp.read_task_timing({"ttlMs": -1, "pollIntervalMs": True}, "modern") == (None, None)


def test_the_poll_delay_follows_the_server_within_bounds_and_never_stretches():
    assert bkmcp.task_poll_delay(1000, 0.0) == pytest.approx(0.8)
    assert bkmcp.task_poll_delay(1000, 0.999999) == pytest.approx(1.0, abs=1e-5)
    assert bkmcp.task_poll_delay(None, 0.5) == pytest.approx(0.9)  # 1 s when the server suggests none
    assert bkmcp.task_poll_delay(1, 0.999) <= bkmcp.TASK_POLL_MIN  # a tight loop is kept to 50 ms
    assert bkmcp.task_poll_delay(10**9, 0.999) <= bkmcp.TASK_POLL_MAX


def test_the_store_path_follows_xdg_state_home_then_home():
    assert bkmcp.task_store_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == "/s/bkmcp/tasks.json"
    assert bkmcp.task_store_path({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == "/h/.local/state/bkmcp/tasks.json"
    assert bkmcp.task_store_path({"HOME": ""}) is None


def test_the_store_records_replaces_and_forgets_expired_handles(tmp_path):
    path = str(tmp_path / "state" / "bkmcp" / "tasks.json")
    assert bkmcp.update_task_store(path, lambda e: e, create=False) == [] and not os.path.exists(path)
    handle = {"mcp_task_id": "a", "server": "s", "ttl_ms": 1500, "status": "working"}
    bkmcp.update_task_store(path, bkmcp.build_store_change(handle, "/c.json", 100, "sid-1"))
    (entry,) = bkmcp.update_task_store(
        path, bkmcp.build_store_change({**handle, "status": "completed"}, "/c.json", 101)
    )
    assert entry["status"] == "completed" and entry["session_id"] == "sid-1"  # the session is kept
    assert (entry["saved_at"], entry["expires_at"]) == (100, 102)  # whole seconds, rounded up
    other = {"mcp_task_id": "b", "server": "s", "ttl_ms": None}
    kept = bkmcp.update_task_store(path, bkmcp.build_store_change(other, "/c.json", 500))
    assert [e["mcp_task_id"] for e in kept] == ["b"]  # "a" expired at 102
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    many = bkmcp.build_store_change
    for i in range(bkmcp.TASK_STORE_LIMIT + 3):
        kept = bkmcp.update_task_store(path, many({"mcp_task_id": f"t{i}", "server": "s"}, "/c.json", 500))
    assert len(kept) == bkmcp.TASK_STORE_LIMIT and kept[-1]["mcp_task_id"] == f"t{bkmcp.TASK_STORE_LIMIT + 2}"


def test_a_store_that_is_not_json_is_read_as_empty_and_rewritten(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text("not json")
    os.chmod(path, 0o644)
    kept = bkmcp.update_task_store(str(path), bkmcp.build_store_change({"mcp_task_id": "x", "server": "s"}, "/c", 1))
    assert [e["mcp_task_id"] for e in kept] == ["x"] and json.loads(path.read_text())["tasks"][0]["server"] == "s"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_store_that_is_a_symlink_is_refused(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (tmp_path / "tasks.json").symlink_to(target)
    with pytest.raises(OSError):
        bkmcp.update_task_store(str(tmp_path / "tasks.json"), lambda e: e)
