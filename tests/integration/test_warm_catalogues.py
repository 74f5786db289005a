"""Kept resource, template and prompt catalogues of a ``--keep-alive`` session (docs/contract.md §14, §11.5): the one
freshness rule of the tool catalogue — kept until a positive ``ttlMs`` passes, the server's
``notifications/resources/list_changed`` (resources and templates) or ``notifications/prompts/list_changed``, or the
user asks for the catalogue itself (``--resources``, ``--prompts``). What reads a kept catalogue: ``--prompt NAME``
(it finds the prompt in the list) and Tab (prompt names, a prompt's flags, resource URIs and templates). Counted on
the server's request log, the warm answers compared byte for byte with the one-shot ones.
"""

from __future__ import annotations

import pytest

import bkmcp
from mock_server.mcp_mock import MockServer
from tests.helpers import write_mcp_json
from tests.integration.test_warm_inprocess import place  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

PROMPT = ("--prompt", "greet", "--who", "Ann")


def _notifying(*notifications: str) -> dict:
    """A scenario whose tools/call sends these list_changed notifications before its result."""
    return {"notifications_before_result": {"tools/call": [{"method": m} for m in notifications]}}


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
def test_a_kept_prompt_catalogue_serves_prompt_until_prompts_list_changed(place, version):  # noqa: F811
    srv = MockServer({"versions": [version], **_notifying("notifications/prompts/list_changed")})
    srv.start()
    try:
        write_mcp_json(place.config, {"p": {"type": "http", "url": srv.url}})
        listed, got = place.main("p", "--prompts"), place.main("p", *PROMPT)
        srv.reset_log()
        assert place.main("p", "--prompts", "--keep-alive") == listed
        assert len(srv.requests("prompts/list")) == 1
        for _ in range(2):
            assert place.main("p", *PROMPT, "--keep-alive") == got
        assert len(srv.requests("prompts/list")) == 1 and len(srv.requests("prompts/get")) == 2  # kept: no list
        assert place.main("p", "--prompts", "--keep-alive") == listed  # the user asks for it: listed again
        assert len(srv.requests("prompts/list")) == 2
        assert place.main("p", "echo", "--text", "x", "--keep-alive")[0] == 0  # its stream: prompts/list_changed
        assert len(srv.requests("prompts/list")) == 2  # the tools' catalogue was not the one that changed
        assert place.main("p", *PROMPT, "--keep-alive") == got
        assert len(srv.requests("prompts/list")) == 3  # stale: listed again, then kept
        assert place.main("p", *PROMPT, "--keep-alive") == got
        assert len(srv.requests("prompts/list")) == 3
        assert len(srv.requests("tools/list")) == 1  # a prompts/list_changed leaves the tool catalogue kept
        assert place.main("p", "echo", "--text", "y", "--keep-alive")[0] == 0
        assert len(srv.requests("tools/list")) == 1
    finally:
        srv.stop()


@pytest.mark.parametrize("ttl, lists", [(60000, 1), (1, 3)])
def test_a_kept_prompt_catalogue_lasts_its_ttl(place, ttl, lists):  # noqa: F811
    """2026-07-28 ``ttlMs``: a positive one ends the kept catalogue when it passes (1 ms: each command lists)."""
    srv = MockServer({"versions": ["2026-07-28"], "ttl_ms": ttl})
    srv.start()
    try:
        write_mcp_json(place.config, {"p": {"type": "http", "url": srv.url}})
        for _ in range(3):
            assert place.main("p", *PROMPT, "--keep-alive")[0] == 0
            bkmcp.time.sleep(0.05)  # well past 1 ms
        assert len(srv.requests("prompts/list")) == lists
    finally:
        srv.stop()


def test_kept_resource_catalogues_answer_tab_until_resources_list_changed(place):  # noqa: F811
    """Tab's URIs and templates from the kept session (``--completion resources``, answered by the warm process):
    no resources/list or resources/templates/list while fresh; a ``notifications/resources/list_changed`` makes
    both stale; the prompt catalogue stays kept through it, and Tab's prompt names and flags come from it."""
    srv = MockServer(_notifying("notifications/resources/list_changed"))
    srv.start()
    try:
        write_mcp_json(place.config, {"r": {"type": "http", "url": srv.url}})
        assert place.main("r", "--resources", "--keep-alive")[0] == 0
        assert place.main("r", "--prompts", "--keep-alive")[0] == 0
        srv.reset_log()
        uris = place.main("--completion", "resources", "r")
        assert uris == (
            0,
            "mock://notes/readme\nmock://images/dot.png\n'mock://notes/{id}'\n'mock://search{?q,lang}'\n",
            "",
        )
        assert place.main("--completion", "prompts", "r") == (0, "greet\nplain\n", "")
        assert place.main("--completion", "flags", "r", "--prompt", "greet") == (0, "--who\n--tone\n", "")
        assert [e["rpc_method"] for e in srv.log if e.get("rpc_method")] == []  # all of it kept
        assert place.main("r", "echo", "--text", "x", "--keep-alive")[0] == 0  # resources/list_changed
        srv.reset_log()
        assert place.main("--completion", "resources", "r") == uris
        assert place.main("--completion", "prompts", "r") == (0, "greet\nplain\n", "")
        methods = [e["rpc_method"] for e in srv.log if e.get("rpc_method")]
        assert sorted(methods) == ["resources/list", "resources/templates/list"]
    finally:
        srv.stop()
