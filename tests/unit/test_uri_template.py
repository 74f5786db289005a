"""RFC 6570 URI templates, expanded locally for ``--read TEMPLATE --VAR VALUE`` (issue 38 item 1, bkmcp.py room
2.6): the RFC's own examples of levels 1-3 (section 1.2 and 3.2) and of the level-4 prefix on strings."""

from __future__ import annotations

import pytest

import bkmcp
from tests.helpers import run_bkmcp, write_mcp_json

# RFC 6570 section 1.2's variables (the string ones; lists and maps cannot come from a flag)
VALUES = {"var": "value", "hello": "Hello World!", "path": "/foo/bar", "empty": "", "x": "1024", "y": "768"}

RFC_EXAMPLES = [
    # Level 1: simple string expansion
    ("{var}", "value"),
    ("{hello}", "Hello%20World%21"),
    # Level 2: reserved (+) and fragment (#)
    ("{+var}", "value"),
    ("{+hello}", "Hello%20World!"),
    ("{+path}/here", "/foo/bar/here"),
    ("here?ref={+path}", "here?ref=/foo/bar"),
    ("X{#var}", "X#value"),
    ("X{#hello}", "X#Hello%20World!"),
    # Level 3: several variables, and the . / ; ? & operators
    ("map?{x,y}", "map?1024,768"),
    ("{x,hello,y}", "1024,Hello%20World%21,768"),
    ("{+x,hello,y}", "1024,Hello%20World!,768"),
    ("{+path,x}/here", "/foo/bar,1024/here"),
    ("{#x,hello,y}", "#1024,Hello%20World!,768"),
    ("{#path,x}/here", "#/foo/bar,1024/here"),
    ("X{.var}", "X.value"),
    ("X{.x,y}", "X.1024.768"),
    ("{/var}", "/value"),
    ("{/var,x}/here", "/value/1024/here"),
    ("{;x,y}", ";x=1024;y=768"),
    ("{;x,y,empty}", ";x=1024;y=768;empty"),
    ("{?x,y}", "?x=1024&y=768"),
    ("{?x,y,empty}", "?x=1024&y=768&empty="),
    ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
    ("{&x,y,empty}", "&x=1024&y=768&empty="),
    # an undefined variable is left out (section 3.2.1)
    ("{?x,undef,y}", "?x=1024&y=768"),
    ("{undef}", ""),
    # Level 4 on strings: the prefix modifier, and explode (a string explodes to itself)
    ("{var:3}", "val"),
    ("{var:30}", "value"),
    ("{+path:6}/here", "/foo/b/here"),
    ("{#path:6}/here", "#/foo/b/here"),
    ("X{.var:3}", "X.val"),
    ("{/var:1,var}", "/v/value"),
    ("{;hello:5}", ";hello=Hello"),
    ("{?var:3}", "?var=val"),
    ("{&var:3}", "&var=val"),
    ("{var*}", "value"),
]


@pytest.mark.parametrize("template, expected", RFC_EXAMPLES)
def test_rfc_6570_examples(template, expected):
    assert bkmcp.expand_uri_template(template, VALUES) == expected


def test_non_ascii_is_utf8_percent_encoded_and_pct_triplets_pass_reserved_expansion():
    assert bkmcp.expand_uri_template("{v}", {"v": "网关 é"}) == "%E7%BD%91%E5%85%B3%20%C3%A9"
    assert bkmcp.expand_uri_template("{+v}", {"v": "a%20b%zz"}) == "a%20b%25zz"
    assert bkmcp.expand_uri_template("{v}", {"v": "a%20b"}) == "a%2520b"


def test_variables_are_listed_once_in_order():
    assert bkmcp.uri_template_variables("demo://{a}/{+b}{?c,a}{&d:3}") == ["a", "b", "c", "d"]
    assert bkmcp.uri_template_variables("demo://plain") == []


@pytest.mark.parametrize("template", ["a{b", "a}b", "{a b}", "{=a}", "{a,}", "{}", "{a:0}", "{-a}"])
def test_a_malformed_template_is_a_usage_error(template):
    with pytest.raises(bkmcp.UsageError):
        bkmcp.parse_uri_template(template)


def _tokens(*pairs):
    return [bkmcp.ToolToken(name, value, False, f"--{name}") for name, value in pairs]


def test_template_values_from_flags():
    assert bkmcp.parse_template_values("x://{a}{?b}", _tokens(("b", "2"), ("a", "1"))) == {"a": "1", "b": "2"}
    for tokens, message in [
        (_tokens(("a", "1"), ("a", "2"), ("b", "3")), "given more than once"),
        (_tokens(("a", "1")), "needs --b"),
        (_tokens(("a", "1"), ("b", "2"), ("c", "3")), "--c is not a variable"),
        (_tokens(("a", None), ("b", "2")), "needs a value"),
    ]:
        with pytest.raises(bkmcp.UsageError, match=message):
            bkmcp.parse_template_values("x://{a}{?b}", tokens)


def test_template_help_is_offline_and_lists_the_variables(tmp_path):
    # the server's URL points nowhere: the help must not need it
    config = write_mcp_json(tmp_path, {"s": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    result = run_bkmcp("--config", str(config), "s", "--read", "demo://r/{id}{?lang}", "--help")
    assert result.exit_status == 0, result.stderr
    assert f"bkmcp --config {config} s --read 'demo://r/{{id}}{{?lang}}' --id VALUE --lang VALUE" in result.stdout
    assert "--id VALUE" in result.stdout and "--lang VALUE" in result.stdout
