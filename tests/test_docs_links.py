"""The docs a reader navigates (#47): the README stays short, and every relative link in the README, CONTRIBUTING,
CHANGELOG and docs/ reaches a file, and its #anchor a heading of that file (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor (a repeated heading gets -1, -2, ... as on GitHub), outside code blocks."""
    seen: dict[str, int] = {}
    out = set()
    for line in re.sub(r"```.*?```", "", markdown, flags=re.S).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slugs_by_hand():
    assert slug("The authors' protocol on Bowman's distribution (issue #32)") == (
        "the-authors-protocol-on-bowmans-distribution-issue-32"
    )
    assert slug("`lm compare`: a study, with seeds") == "lm-compare-a-study-with-seeds"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for url in LINK.findall(text):
        if re.match(r"[a-z]+:", url):  # http(s), mailto: not checked offline
            continue
        path, _, frag = url.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        if not target.exists():
            broken.append(f"{url} (no such file)")
        elif frag and target.suffix == ".md" and frag not in anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{url} (no such heading)")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"
