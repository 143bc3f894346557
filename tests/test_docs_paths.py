"""The docs cite what a reader of the repository can open (issue #35): the papers by title, not the
maintainers' reading notes (``specs/…``) or paper extracts (``shared/papers/…``), which are not in it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_cites_a_path_outside_the_repository(doc):
    cited = re.findall(r"(?:\.\./)*(?:shared/)?(?:specs|papers)/[\w./-]+", doc.read_text())
    assert not [c for c in cited if not (ROOT / c).exists()], f"{doc.name} cites {cited}"
