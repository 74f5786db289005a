"""Cold-start concurrency of the resident mode (issue 16 item 6a, docs/contract.md §11.1): 20 fresh processes each
receive 500 commands across every server kind (public and per-user, HTTP and stdio) before any answer is read;
every command is answered, none with internal_error, no child is left."""

from __future__ import annotations

from cold_start import run_cold_starts


def test_fresh_residents_answer_a_burst_of_first_commands_without_internal_error(tmp_path):
    assert run_cold_starts(tmp_path, processes=20, commands=500) == []
