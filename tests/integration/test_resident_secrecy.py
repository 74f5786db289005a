"""Cross-user secrecy (issue 16, docs/contract.md §11.5), as a hypothesis property over one long-lived resident.

Three users, each with unique sentinels for their tool arguments, their credentials and their access tokens,
run random interleaved commands against public and per-user servers over stdio and HTTP. The stdio servers log
every line they receive (arguments included) to their stderr, and some commands make them crash, so a failure
could carry a child's stderr; some commands fail with an error that echoes the user's own text (an unknown tool
name, an argument outside an enum), and some use *another* user's secret as that text (a guess).

For every answer of user U: no other user's sentinel appears (but for the guess U typed), and U's own text comes
back as U sent it, never ``***``-ed by another user's values. Events and the non-``-v`` log carry no sentinel
of anyone (the guesses U typed aside).
"""

from __future__ import annotations

import itertools
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resident_harness import Resident, http_row, mock_stdio, resident_serving, stdio_row, write_registry

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import FUZZ_EXAMPLES

USERS = ("u-ann", "u-ben", "u-cat")
KINDS = ("arg", "cred", "region", "tok")
SENTINEL = {
    (user, kind): f"{kind}-{user[2:]}-{i:02d}a9" for i, (user, kind) in enumerate(itertools.product(USERS, KINDS))
}
SYSTEM = "system-secret-7c1e"
TOOLS = [*DEFAULT_TOOLS, mock_tool("crash", "drop"), mock_tool("whoami", "env", vars=["MY_TOKEN"])]
SERVERS = ("spub", "sown", "hpub", "hown")  # stdio public / per-user, HTTP public / per-user


def logging_stdio() -> list[str]:
    argv = mock_stdio({"tools": TOOLS})
    argv.remove("--quiet")  # every received line (with the call's arguments) goes to the child's stderr
    return argv


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resident-secrecy")
    srv = MockServer({"tools": TOOLS})
    srv.start()
    rows = [
        stdio_row("spub", logging_stdio(), isolation="public", env={"SYS": "${user.sys}"}),
        stdio_row("sown", logging_stdio(), env={"MY_TOKEN": "${user.token}", "REGION": "${user.region}"}),
        http_row("hpub", srv.url, headers={"X-System": "${user.sys}"}),
        http_row(
            "hown", srv.url, isolation="user", headers={"X-Tenant": "${user.token}", "X-Region": "${user.region}"}
        ),
    ]
    users = {}
    for user in USERS:
        for server in ("sown", "hown"):
            users[(user, server)] = {"token": SENTINEL[(user, "cred")], "region": SENTINEL[(user, "region")]}
    reg = tmp / "registry.db"
    write_registry(str(reg), rows, {"spub": {"sys": SYSTEM}, "hpub": {"sys": SYSTEM}}, users)
    yield from resident_serving(reg, srv, "--max-user-processes", "2")


ACTIONS = (
    "echo",
    "crash",
    "badarg",
    "notool",
    "guess",
    "list_tools",
    "list_servers",
    "connect",
    "disconnect",
    "whoami",
)
steps = st.tuples(
    st.sampled_from(USERS),
    st.sampled_from(ACTIONS),
    st.sampled_from(SERVERS),
    st.sampled_from([(u, k) for u in USERS for k in KINDS]),  # whose secret a guess uses
)
_TASKS = itertools.count(1)
# over the whole module (the events file holds every example's events): task -> user, what each user typed
_OWNERS: dict[str, str] = {}
_TYPED: dict[str, set[str]] = {user: set() for user in USERS}


def build(user: str, action: str, server: str, guessed: tuple[str, str]) -> tuple[str, dict, str | None]:
    """(action, params, the text of the user's own that must come back verbatim)."""
    own = SENTINEL[(user, "arg")]
    if action == "echo":
        return "call_tool", {"server_name": server, "tool_name": "echo", "arguments": {"text": own}}, None
    if action == "whoami":
        return "call_tool", {"server_name": server, "tool_name": "whoami", "arguments": {}}, None
    if action == "crash":
        return "call_tool", {"server_name": server, "tool_name": "crash", "arguments": {"text": own}}, None
    if action == "badarg":
        return "call_tool", {"server_name": server, "tool_name": "pick", "arguments": {"color": own}}, None
    if action == "notool":
        return "call_tool", {"server_name": server, "tool_name": own}, own
    if action == "guess":
        return "call_tool", {"server_name": server, "tool_name": SENTINEL[guessed]}, SENTINEL[guessed]
    if action == "connect":
        return "connect_server", {"server_name": server}, None
    if action == "disconnect":
        return "disconnect_server", {"server_name": server}, None
    return action, {}, None


@settings(max_examples=max(10, FUZZ_EXAMPLES // 20), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(steps, min_size=3, max_size=10))
def test_no_user_learns_another_users_data(world, script):
    res, _srv = world
    sent: dict[str, tuple[str, str, str | None]] = {}
    for user, action, server, guessed in script:
        name, params, echoed = build(user, action, server, guessed)
        task = f"s{next(_TASKS)}"
        token = SENTINEL[(user, "tok")]
        body = res.command(name, user, task_id=task, token=token, **params)
        res.send_raw((json.dumps(body) + "\n").encode())
        if echoed is not None:
            _TYPED[user].add(echoed)
        sent[task] = (user, action, echoed if action != "guess" or guessed[0] != user else None)
    typed = _TYPED  # what each user typed (a tool name): theirs to see
    for task, (user, action, echoed) in sent.items():
        answer = res.wait(task)
        text = json.dumps(answer)
        allowed = {echoed} if action == "guess" else set()
        for (other, _kind), sentinel in SENTINEL.items():
            if other != user and sentinel not in allowed:
                assert sentinel not in text, (user, action, answer)
        assert SYSTEM not in text
        if echoed is not None and answer["success"] is False and answer["error_code"] == "mcp_tool_not_found":
            assert echoed in text, (user, action, answer)  # the user's own text, never *** for someone else's value
    owners = _OWNERS
    owners.update({task: user for task, (user, _a, _e) in sent.items()})
    for event in res.events():  # names, ids, counts and codes: a tool name the event's own user typed at most
        blob = json.dumps(event)
        assert SYSTEM not in blob
        owner = event.get("user") or owners.get(event.get("task_id"))
        for (whose, kind), sentinel in SENTINEL.items():
            own_secret = whose == owner and kind != "arg"  # the owner's own secret, typed or not: never
            if owner is None or own_secret or sentinel not in typed.get(owner, ()):
                assert sentinel not in blob, event
    logs = "".join(res.stderr_lines)
    assert SYSTEM not in logs
    for sentinel in SENTINEL.values():
        assert sentinel not in logs


def call_after_backoff(res: Resident, user: str, **params) -> dict:
    """A successful ``call_tool``, once the restart backoff the property's ``crash`` steps left has run out.

    The backoff is the contract (a crash-looping child is not restarted at once): a refusal carries
    ``retry_after_ms``, and the call is made again after that long, a bounded number of times.
    """
    for _attempt in range(6):
        answer = res.ask("call_tool", user, **params)
        if answer["success"] is True:
            return answer["result"]
        wait_ms = answer.get("details", {}).get("retry_after_ms")
        assert wait_ms is not None, answer  # any other failure is a failure
        time.sleep(wait_ms / 1000 + 0.05)
    raise AssertionError(f"still refused after six backoffs: {answer}")


def test_whoami_gets_each_users_own_credential(world):
    """What the servers received: each user's own credential, never another user's (a tool's result is data)."""
    res, srv = world
    for user in USERS:
        result = call_after_backoff(res, user, server_name="sown", tool_name="whoami", arguments={})
        assert result["result"]["structuredContent"]["env"]["MY_TOKEN"] == SENTINEL[(user, "cred")]
    srv.reset_log()
    for user in USERS:
        res.ok("call_tool", user, server_name="hown", tool_name="echo", arguments={"text": SENTINEL[(user, "arg")]})
    for entry in srv.requests("tools/call"):
        caller = json.loads(entry["body"])["params"]["arguments"]["text"]
        user = next(u for u in USERS if SENTINEL[(u, "arg")] == caller)
        assert entry["headers"]["x-tenant"] == SENTINEL[(user, "cred")]
        assert entry["headers"]["x-region"] == SENTINEL[(user, "region")]
