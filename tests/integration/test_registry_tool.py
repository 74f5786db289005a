"""The ``--registry FILE --import mcp.json | --list`` tool on the real entry point (docs/contract.md §11.3): what it
warns about at import and what a listing shows of a row's ``args``."""

from __future__ import annotations

import json

from tests.helpers import run_bkmcp, write_mcp_json


def test_literal_secrets_in_registry_args_warn_at_import_and_are_masked_by_list(tmp_path):
    """Before: ``--registry … --list`` printed ``["--token", "<secret>"]`` in clear, and --import said nothing.
    Now --import warns (never showing the value) and --list prints the value after a secret-looking flag, and a
    ``--flag=value`` form, as ``***``; a ``${…}`` reference and other flags stay as they are. The registry keeps the
    real values (the server needs them)."""
    import sqlite3

    args = ["server.js", "--token", "lit-tok-9f2", "--api-key=lit-key-4a7", "--verbose", "--auth", "${TOK}", "-p", "8"]
    config = write_mcp_json(tmp_path, {"s": {"type": "stdio", "command": "node", "args": args}})
    reg = str(tmp_path / "registry.db")
    imported = run_bkmcp("--registry", reg, "--import", str(config))
    assert imported.exit_status == 0, imported.stdout + imported.stderr
    assert "server 's': its args hold a literal secret" in imported.stderr
    listed = run_bkmcp("--registry", reg, "--list")
    assert listed.exit_status == 0, listed.stderr
    (row,) = listed.json["data"]["servers"]
    assert row["args"] == ["server.js", "--token", "***", "--api-key=***", "--verbose", "--auth", "${TOK}", "-p", "8"]
    for secret in ("lit-tok-9f2", "lit-key-4a7"):
        assert secret not in imported.stdout + imported.stderr + listed.stdout + listed.stderr
    with sqlite3.connect(reg) as db:
        (stored,) = db.execute("SELECT args FROM mcp_servers WHERE name = 's'").fetchone()
    assert json.loads(stored) == args


def test_secret_arg_positions_edge_cases():
    from bkmcp import render_registry_args, secret_arg_positions

    assert secret_arg_positions(["--token", "--verbose", "--key"]) == []  # a flag, then nothing: no value given
    assert secret_arg_positions(["--token", "-"]) == [1]  # "-" is a value (stdin), not a flag
    assert secret_arg_positions([7, "--password=", "--auth=${A}$${B}"]) == [2]  # empty: nothing; "$${" is literal
    assert render_registry_args(None) is None and render_registry_args(["--secret", "x"]) == ["--secret", "***"]
