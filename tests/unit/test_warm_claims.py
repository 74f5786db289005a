"""Issue 28 point 10: the READMEs and SKILL.md state warm-call speed only as bench/warm.py measured it (the figures
of docs/interop.md's "Warm sessions" table), never as an unmeasured "tens of milliseconds"."""

from __future__ import annotations

import re

from tests.helpers import ROOT

CLAIMS = ("README.md", "README_zh.md", "skills/bkmcp/SKILL.md", "docs/warm-sessions.md")


def _measured() -> dict[str, float]:
    """The rows of docs/interop.md's bench/warm.py table: command -> ms."""
    text = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    section = text.split("## Warm sessions", 1)[1].split("\n## ", 1)[0]
    assert "bench/warm.py" in section
    rows = re.findall(r"^\| (.+?) \| ([0-9.]+) \| [0-9.]+ \|$", section, re.M)
    return {command: float(ms) for command, ms in rows}


def test_no_unmeasured_warm_speed_promise() -> None:
    for name in CLAIMS:
        text = (ROOT / name).read_text(encoding="utf-8")
        for phrase in ("tens of milliseconds", "几十毫秒", "数十毫秒"):
            assert phrase not in text, (name, phrase)


def test_quoted_warm_figures_are_the_measured_ones() -> None:
    measured = _measured()
    warm_stdio = round(measured["the same, warm (`--keep-alive`, session already open)"])
    one_shot = round(measured["SDK server (stdio) `add --a 2 --b 3`, one-shot"])
    warm_http = round(measured["the same, warm"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"measured {warm_stdio} ms (stdio) and {warm_http} ms (HTTP)" in readme
    assert f"against {one_shot} ms one-shot" in readme
    zh = (ROOT / "README_zh.md").read_text(encoding="utf-8")
    assert f"{warm_stdio} 毫秒（stdio）和 {warm_http} 毫秒（HTTP）" in zh and f"{one_shot} 毫秒" in zh
    skill = (ROOT / "skills" / "bkmcp" / "SKILL.md").read_text(encoding="utf-8")
    about = round((warm_stdio + warm_http) / 2, -1)  # "about 40 ms": both warm rows, to the nearest ten
    assert f"about {about:.0f} ms a warm call, {one_shot} ms one-shot" in skill
    assert f"热调用约 {about:.0f} 毫秒，一次性 stdio 调用 {one_shot} 毫秒" in skill
