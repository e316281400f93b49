"""The README starts with what matters, and every link of the docs leads somewhere.

The snippets of the README and of docs/ are run (and their printed output
compared) by tests/test_docs_snippets.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs_snippets import ROOT, doc_files, snippets

README = ROOT / "README.md"
#: The sections of the README, in order: what it is and how it differs, the
#: two commands, a quickstart, the picture, then the guides.
SECTIONS = ["How it differs", "Two commands", "Quickstart", "Architecture", "Guides", "License"]
#: The guide pages the README links to, one line each.
GUIDES = [
    "sessions",
    "context",
    "memory-types",
    "workers",
    "recall",
    "long-term",
    "adapters",
    "server",
    "local",
    "cli",
    "configuration",
    "operations",
    "architecture",
    "development",
]
PEERS = ["mem0", "Zep", "Agent Memory Server", "LangGraph"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_sections_come_in_order() -> None:
    headings = re.findall(r"^## (.+)$", text(), re.MULTILINE)
    assert headings == SECTIONS


def test_the_first_screen_says_what_it_is_and_for_whom() -> None:
    intro = text().split("\n## ", 1)[0]
    assert "memory for fleets of LLM agents" in intro
    assert "**For**" in intro
    assert len(intro.splitlines()) <= 20


def test_the_comparison_table_names_each_peer_and_each_point() -> None:
    section = text().split("## How it differs", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("|"))
    for peer in PEERS:
        assert peer in header, peer
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    for point in ("Needs", "A write", "Two agents write one session", "Contradicting facts"):
        assert point in rows, point
    assert "Expiry" in rows and "Forget a user" in rows
    columns = {line.count("|") for line in section.splitlines() if line.startswith("|")}
    assert columns == {len(PEERS) + 3}, "every row has a cell per system"


def test_the_two_commands_are_there_with_a_place_for_their_timings() -> None:
    section = text().split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert "`bash scripts/run`" in section and "`bash scripts/test`" in section
    assert section.count("<!-- timing -->") == 2


def test_the_quickstart_runs_and_shows_its_output() -> None:
    (quickstart, *_) = [s for s in snippets(README) if s.skip is None]
    assert "asyncio.run(main())" in quickstart.code
    assert quickstart.output is not None and "keys removed" in quickstart.output


def test_the_architecture_picture_shows_every_part() -> None:
    section = text().split("## Architecture", 1)[1].split("\n## ", 1)[0]
    for part in (
        "Memory",
        "sessions",
        "recall index",
        "long-term store",
        "queue",
        "redismem worker",
        "summarize",
        "index",
        "extract",
        "HTTP",
        "MCP",
    ):
        assert part in section, part


def test_the_readme_links_every_guide_once_per_line() -> None:
    section = text().split("## Guides", 1)[1].split("\n## ", 1)[0]
    for guide in GUIDES:
        lines = [line for line in section.splitlines() if f"(docs/{guide}.md)" in line]
        assert len(lines) == 1, guide


def _links(path: Path) -> list[str]:
    body = path.read_text(encoding="utf-8")
    body = re.sub(r"```.*?```", "", body, flags=re.DOTALL)  # not inside code
    return LINK.findall(body)


#: Pages other engineers write for this issue (linked before they land).
PENDING = {ROOT / "docs" / "local.md", ROOT / "docs" / "cli.md", ROOT / "LICENSE"}


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    for link in _links(page):
        if re.match(r"^[a-z]+:", link):
            continue  # http(s), mailto
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if path in PENDING and not path.exists():
            continue
        assert path.exists(), f"{page.name}: {link}"
        if anchor and path.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
            slugs = {_slug(h) for h in headings}
            assert anchor in slugs, f"{page.name}: {link} (headings: {sorted(slugs)})"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_has_a_cell_per_column_in_every_row(page: Path) -> None:
    """A row with a cell too many or too few renders badly (or not as a table)."""
    body = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    tables: list[list[str]] = []
    previous = ""
    for line in body.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    for rows in tables:
        cells = [len(re.split(r"(?<!\\)\|", row.strip().strip("|"))) for row in rows]
        assert re.fullmatch(r"\|( *:?-+:? *\|)+", rows[1].replace(" ", "")), rows[:2]
        assert len(set(cells)) == 1, f"{page.name}: {rows[0][:60]}... cells {cells}"
