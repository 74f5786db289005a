"""Tab after ``--prompt`` and ``--read`` (contract §2): prompt names, resource URIs and templates, a prompt's
arguments and a template's variables as flags, and the values the server's ``completion/complete`` offers for the
argument being typed, with the arguments already typed as ``context.arguments`` — only from a server that declares
``completions``. Against the mock (both eras, HTTP and stdio: what the server received, and nothing without the
capability), through a real bash and zsh under tmux (a value a shell would expand is offered quoted or not at all),
from a kept ``--keep-alive`` session, and against server-everything's completable prompt and template.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from mock_server.mcp_mock import DEFAULT_COMPLETIONS, MockServer
from tests.helpers import ROOT, run_bkmcp, until, write_mcp_json
from tests.integration.test_completion_shells import _count, _open_shell_world

pytestmark = pytest.mark.integration

MOCK = ROOT / "mock_server" / "mcp_mock.py"
MODERN, LEGACY = "2026-07-28", "2025-11-25"
WITH_COMPLETIONS = {"tools": {}, "resources": {}, "prompts": {}, "completions": {}}


def _completions(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("rpc_method") == "completion/complete"]


def _params(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry["json"]["params"].items() if k != "_meta"}


@pytest.mark.parametrize("version", [MODERN, LEGACY])
def test_the_words_of_prompts_resources_flags_and_values_come_from_the_server(tmp_path, version):
    """``--completion prompts|resources|flags|values`` (what the scripts run) over HTTP in both eras: one
    ``completion/complete`` per value completion, its ``ref``, ``argument`` and ``context.arguments``, with
    ``Mcp-Method`` and no ``Mcp-Name`` on 2026-07-28; a value a shell would expand quoted, one it cannot quote left
    out; a template's variables read from the template (no request)."""
    with MockServer({"versions": [version], "capabilities": WITH_COMPLETIONS}) as server:
        config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": server.url}})

        def words(*args: str) -> list[str]:
            done = run_bkmcp("--config", str(config), "--completion", *args)
            assert (done.exit_status, done.stderr) == (0, ""), done
            return done.stdout.splitlines()

        assert words("prompts", "m") == ["greet", "plain"]
        assert words("resources", "m") == [
            "mock://notes/readme",
            "mock://images/dot.png",
            "'mock://notes/{id}'",
            "'mock://search{?q,lang}'",
        ]
        assert words("flags", "m", "--prompt", "greet") == ["--who", "--tone"]
        server.reset_log()
        assert words("flags", "m", "--read", "mock://search{?q,lang}") == ["--q", "--lang"]
        assert server.log == []  # a template's variables: offline
        values = words("values", "m", "--prompt", "greet", "--who", "Ann", "--tone", "")
        assert values == ["friendly", "formal", "'$(touch pwned)'", "'two words'"]  # never "it's"
        assert words("values", "m", "--prompt", "greet", "--who", "Ann", "--tone", "fr") == ["friendly"]
        assert words("values", "m", "--read", "mock://notes/{id}", "--id", "r") == ["readme", "r1", "r2"]
        assert words("values", "m", "--read", "mock://search{?q,lang}", "--q", "x", "--lang", "e") == ["en"]
        sent = _completions(server.log)
        assert [_params(e) for e in sent] == [
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "tone", "value": ""},
                "context": {"arguments": {"who": "Ann"}},
            },
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "tone", "value": "fr"},
                "context": {"arguments": {"who": "Ann"}},
            },
            {"ref": {"type": "ref/resource", "uri": "mock://notes/{id}"}, "argument": {"name": "id", "value": "r"}},
            {
                "ref": {"type": "ref/resource", "uri": "mock://search{?q,lang}"},
                "argument": {"name": "lang", "value": "e"},
                "context": {"arguments": {"q": "x"}},
            },
        ]
        for entry in sent:
            headers = entry["headers"]
            assert headers.get("mcp-method") == ("completion/complete" if version == MODERN else None)
            assert "mcp-name" not in headers


def test_a_server_without_the_completions_capability_gets_no_completion_request(tmp_path):
    """No ``completions`` declared: a value Tab prints nothing and sends no ``completion/complete`` (names and
    flags still come); over stdio from the user's own config too."""
    log = tmp_path / "stdio.jsonl"
    args = [str(MOCK), "--stdio", "--quiet", "--log", str(log)]
    with MockServer({}) as server:
        servers = {
            "m": {"type": "http", "url": server.url},
            "s": {"type": "stdio", "command": sys.executable, "args": args},
        }
        write_mcp_json(tmp_path / "mcp.json", servers)
        env = {"BK_CLI_CONFIG_DIR": str(tmp_path), "HOME": str(tmp_path)}
        for name in ("m", "s"):
            done = run_bkmcp("--completion", "values", name, "--prompt", "greet", "--tone", "f", env=env)
            assert (done.exit_status, done.stdout, done.stderr) == (0, "", "")
            assert run_bkmcp("--completion", "prompts", name, env=env).stdout == "greet\nplain\n"
        assert _completions(server.log) == [] and len(server.requests("prompts/list")) == 1
    assert _count(log, "completion/complete") == 0 and _count(log, "prompts/list") == 1


@pytest.fixture(params=["bash", "zsh"])
def shell_world(request, tmp_path):
    yield from _open_shell_world(request.param, tmp_path)


def test_tab_offers_prompt_names_uris_flags_and_the_servers_values(shell_world):
    """Through the real shell: ``--prompt <Tab>`` the prompt names, ``--read <Tab>`` the URIs and the templates, a
    URI completed across bash's ':' split, ``--prompt NAME --<Tab>`` its arguments, a template's variables, and the
    values of ``completion/complete`` after an argument's flag. A value a shell would expand is offered only quoted
    (bash: in single quotes; zsh quotes it itself), so choosing it runs nothing; one with a quote never."""
    kind, shell, world = shell_world
    world.http.core.update({"capabilities": WITH_COMPLETIONS})
    tabs = 1 if kind == "bash" else 2  # zsh inserts the common prefix first, then lists
    if kind == "bash":
        shown = {"id": "'mock://notes/{id}'", "search": "'mock://search{?q,lang}'"}
        shown |= {"pwned": "'$(touch pwned)'", "two": "'two words'"}
    else:
        shown = {"id": "mock://notes/\\{id\\}", "search": "mock://search\\{\\?q,lang\\}"}
        shown |= {"pwned": "\\$\\(touch\\ pwned\\)", "two": "two\\ words"}
    screen = shell.complete("bkmcp hu --prompt ", "plain")
    assert "greet" in screen and "ecfile" not in screen
    screen = shell.complete("bkmcp hu --read ", "mock://images/dot.png", tabs)
    assert "mock://notes/readme" in screen and shown["id"] in screen and shown["search"] in screen, screen
    if kind == "bash":  # bash split the word at ':' and replaces only what follows it
        shell.complete("bkmcp hu --read mock://no", "bkmcp hu --read mock://notes/readme")
    else:
        shell.complete("bkmcp hu --read mock://no", "mock://notes/readme", tabs)
    screen = shell.complete("bkmcp hu --prompt greet --", "--tone")
    assert "--who" in screen and "--jq" in screen and "--body" not in screen and "--check" not in screen
    screen = shell.complete("bkmcp hu --read 'mock://search{?q,lang}' --", "--lang")
    assert "--q" in screen
    screen = shell.complete("bkmcp hu --read='mock://search{?q,lang}' --", "--lang")
    assert "--q" in screen
    world.http.reset_log()
    screen = shell.complete("bkmcp hu --prompt greet --who Ann --tone ", shown["two"], tabs)
    assert "friendly" in screen and "formal" in screen and shown["pwned"] in screen and "it's" not in screen
    sent = _completions(world.http.log)
    assert sent and _params(sent[-1]) == {
        "ref": {"type": "ref/prompt", "name": "greet"},
        "argument": {"name": "tone", "value": ""},
        "context": {"arguments": {"who": "Ann"}},
    }
    shell.complete("bkmcp hu --prompt greet --who Ann --tone fr", "--tone friendly")
    screen = shell.complete("bkmcp hu --read 'mock://notes/{id}' --id r", "r2")
    assert "readme" in screen and "r1" in screen
    assert not (world.tmp / "pwned").exists()


@pytest.fixture(params=["bash", "zsh", "fish"])
def any_shell_world(request, tmp_path):
    yield from _open_shell_world(request.param, tmp_path)


def test_a_kept_session_answers_the_value_completion(any_shell_world):
    """With ``--keep-alive`` holding a stdio server's session, a prompt's names, flags and values come from the
    kept process: the kept server received the ``completion/complete`` and no second server started."""
    _kind, shell, world = any_shell_world
    log = world.tmp / "sc-log.jsonl"
    scenario = json.dumps({"capabilities": WITH_COMPLETIONS})
    args = [str(MOCK), "--stdio", "--quiet", "--scenario-json", scenario, "--log", str(log)]
    world.servers["sc"] = {"type": "stdio", "command": sys.executable, "args": args}
    write_mcp_json(world.config, world.servers)
    shell.command("bkmcp sc --prompts --keep-alive >/dev/null")
    kept = [(s["server"], s["pid"]) for s in world.sessions()["sessions"]]
    assert _count(log, "server/discover") == 1 and len(kept) == 1
    shell.complete("bkmcp sc --prompt ", "plain")
    shell.complete("bkmcp sc --prompt greet --", "--tone")
    screen = shell.complete("bkmcp sc --prompt greet --who Ann --tone f", "formal")
    assert "friendly" in screen
    assert _count(log, "completion/complete") == 1
    assert _count(log, "server/discover") == 1  # the kept server answered: no other one started
    assert [(s["server"], s["pid"]) for s in world.sessions()["sessions"]] == kept


def test_server_everything_offers_its_completable_prompt_and_template_values(tmp_path, everything_server):
    """server-everything declares ``completions``: ``completable-prompt``'s ``department`` values, its ``name``
    narrowed by the department already typed (``context.arguments``), ``resource-prompt``'s types, and the text
    template's ``resourceId`` (it offers a positive integer back)."""
    config = write_mcp_json(tmp_path / "mcp.json", {"ev": {"type": "http", "url": everything_server.url}})

    def words(*args: str) -> list[str]:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), "--completion", *args]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert (done.returncode, done.stderr) == (0, ""), done
        return done.stdout.splitlines()

    assert "completable-prompt" in words("prompts", "ev")
    assert "'demo://resource/dynamic/text/{resourceId}'" in words("resources", "ev")
    assert words("flags", "ev", "--prompt", "completable-prompt") == ["--department", "--name"]
    assert words("values", "ev", "--prompt", "completable-prompt", "--department", "") == [
        "Engineering",
        "Sales",
        "Marketing",
        "Support",
    ]
    assert words("values", "ev", "--prompt", "completable-prompt", "--department", "Sales", "--name", "") == [
        "David",
        "Eve",
        "Frank",
    ]
    assert words("values", "ev", "--prompt", "resource-prompt", "--resourceType", "T") == ["Text"]
    template = "demo://resource/dynamic/text/{resourceId}"
    assert words("values", "ev", "--read", template, "--resourceId", "7") == ["7"]
    assert words("values", "ev", "--read", template, "--resourceId", "x") == []


@pytest.fixture
def bash_world(tmp_path):
    yield from _open_shell_world("bash", tmp_path)


def test_tab_offers_server_everythings_values_in_bash(bash_world, everything_server):
    """The real bash against server-everything over HTTP: ``completable-prompt``'s ``name`` values narrowed by the
    ``--department`` typed before it, and the text template's ``resourceId`` (the server offers a positive integer
    back)."""
    _kind, shell, world = bash_world
    world.servers["ev"] = {"type": "http", "url": everything_server.url}
    write_mcp_json(world.config, world.servers)
    screen = shell.complete("bkmcp ev --prompt comp", "bkmcp ev --prompt completable-prompt")
    screen = shell.complete("bkmcp ev --prompt completable-prompt --department ", "Marketing")
    assert "Engineering" in screen and "Sales" in screen and "Support" in screen
    screen = shell.complete("bkmcp ev --prompt completable-prompt --department Sales --name ", "Frank")
    assert "David" in screen and "Eve" in screen and "Alice" not in screen
    shell.command("true")  # the one value offered is the one typed: bash ends the word (a space follows it)
    shell.keys("C-u")
    shell.type("bkmcp ev --read 'demo://resource/dynamic/text/{resourceId}' --resourceId 4")
    shell.keys("Tab")
    shell.type("X")
    until(lambda: "--resourceId 4 X" in shell.screen(), "the resourceId value completed", 60)
    shell.keys("C-u")


# what the hostile prompt's `tone` offers: each a value fish would expand, glob, split or run unescaped
HOSTILE = ["friendly", "$(touch pwned)", "(touch pwned)", "*", "~", "{a,b}", "two words", "a;touch pwned", "it's"]


@pytest.fixture
def fish_world(tmp_path):
    yield from _open_shell_world("fish", tmp_path)


def _choose(shell: Any, line: str, typed: str, shown: str) -> None:
    """Type ``line`` and ``typed``, press Tab until ``shown`` (the one value completed, as fish escaped it) follows
    ``line``, then run the line (its output dropped) and wait for its end."""
    shell.command("true")
    shell.keys("C-u")
    shell.type(line + typed)
    shell.keys("Tab")
    until(lambda: line + shown in shell.screen(), f"{shown!r} after {line + typed!r}<Tab>", 60)
    shell.count += 1
    shell.type(f">/dev/null; echo done-{shell.product}-{shell.count}")
    shell.keys("Enter")
    until(lambda: f"done-42-{shell.count}" in shell.screen(), f"the shell ran {line + typed!r}", 60)


def test_fish_tab_offers_prompt_names_uris_flags_and_the_servers_values(fish_world):
    """The real fish: ``--prompt <Tab>`` the prompt names, ``--read <Tab>`` the URIs and templates (a template
    inserted escaped, its variables then offered as flags), a prompt's arguments as flags, and the values of
    ``completion/complete`` for the argument typed, with the arguments before it as ``context.arguments``. A value
    fish would expand, glob, split or run is inserted escaped by fish: choosing it and pressing Enter sends the
    server exactly that value and runs nothing; one bkmcp cannot quote (``it's``) is never offered."""
    _kind, shell, world = fish_world
    completions = {**DEFAULT_COMPLETIONS, "ref/prompt greet tone": HOSTILE}
    world.http.update(capabilities=WITH_COMPLETIONS, completions=completions)
    screen = shell.complete("bkmcp hu --prompt ", "plain")
    assert "greet" in screen and "ecfile" not in screen
    screen = shell.complete("bkmcp hu --read ", "mock://images/dot.png")
    assert "mock://notes/readme" in screen and "mock://notes/{id}" in screen and "search{?q,lang}" in screen, screen
    shell.complete("bkmcp hu --read mock://notes/r", "bkmcp hu --read mock://notes/readme")
    shell.complete("bkmcp hu --read mock://se", "bkmcp hu --read mock://search\\{\\?q,lang\\}")
    screen = shell.complete("bkmcp hu --read mock://search\\{\\?q,lang\\} --", "--lang")
    assert "--q" in screen and "--jq" in screen and "--body" not in screen and "--check" not in screen
    screen = shell.complete("bkmcp hu --read='mock://search{?q,lang}' --q x --lang ", "en")
    assert "de" in screen and "fr" in screen
    screen = shell.complete("bkmcp hu --prompt greet --", "--tone")
    assert "--who" in screen and "--jq" in screen and "--body" not in screen and "--check" not in screen
    world.http.reset_log()
    screen = shell.complete("bkmcp hu --prompt greet --who Ann --tone ", "friendly")
    for value in HOSTILE[1:-1]:
        assert value in screen, (value, screen)
    assert "it's" not in screen
    assert [_params(e) for e in _completions(world.http.log)] == [
        {
            "ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "tone", "value": ""},
            "context": {"arguments": {"who": "Ann"}},
        }
    ]
    typed = {"$(touch pwned)": "\\$", "(touch pwned)": "\\(", "*": "\\*", "~": "\\~", "{a,b}": "\\{"}
    typed |= {"two words": "'two w", "a;touch pwned": "a"}
    shown = {"$(touch pwned)": "\\$\\(touch\\ pwned\\)", "(touch pwned)": "\\(touch\\ pwned\\)", "*": "\\*"}
    shown |= {"~": "\\~", "{a,b}": "\\{a,b\\}", "two words": "'two words'", "a;touch pwned": "a\\;touch\\ pwned"}
    for value in HOSTILE[1:-1]:
        world.http.reset_log()
        _choose(shell, "bkmcp hu --prompt greet --who Ann --tone ", typed[value], shown[value])
        (sent,) = _completions(world.http.log)
        assert sent["json"]["params"]["argument"] == {"name": "tone", "value": typed[value].strip("'\\")}
        (got,) = world.http.requests("prompts/get")
        assert got["json"]["params"]["arguments"] == {"who": "Ann", "tone": value}
    assert not (world.tmp / "pwned").exists()
