"""The sizes the READMEs state are the build's (issue 17 item 7: 21.7 / 3.7 MB were typed by hand and went stale).

README.md and README_zh.md say how big the default build and a `--platform none` build are, to 0.1 MB; this
builds both (the default one is the session's pyz) and compares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from artifact_helpers import ROOT, build_pyz, program_source

READMES = [ROOT / "README.md", ROOT / "README_zh.md"]


def _stated(readme: Path) -> tuple[float, float]:
    """(default build MB, --platform none MB) as the Install table states them."""
    row = next(
        line for line in readme.read_text(encoding="utf-8").splitlines() if "build_zipapp.py --platform none" in line
    )
    sizes = [float(m) for m in re.findall(r"(\d+(?:\.\d)?) MB", row)]
    assert len(sizes) == 2, f"{readme.name}: expected two sizes in the Install row: {row}"
    return sizes[0], sizes[1]


@pytest.fixture(scope="module")
def pyz_platform_none(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pyz(tmp_path_factory.mktemp("pyz-none") / "bkmcp.pyz", "--platform", "none", source=program_source())


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.name)
def test_readme_sizes_are_the_builds(readme: Path, pyz_path: Path, pyz_platform_none: Path) -> None:
    full, lean = _stated(readme)
    built_full, built_lean = pyz_path.stat().st_size / 1e6, pyz_platform_none.stat().st_size / 1e6
    assert abs(full - built_full) <= 0.1, f"{readme.name} says {full} MB, the build gives {built_full:.1f} MB"
    assert abs(lean - built_lean) <= 0.1, f"{readme.name} says {lean} MB, --platform none gives {built_lean:.1f} MB"
