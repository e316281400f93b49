"""Every ```python block of README.md and docs/**/*.md runs as written.

The convention (for everyone writing docs):

* Each ```` ```python ```` block is a complete, standalone script. It runs in
  a fresh interpreter (a subprocess), in a fresh temporary working directory,
  with no ``REDISMEM_*`` variable set, so it uses ``memory://`` (or
  ``local://``) by itself. ``PYTHONPATH`` points at this checkout.
* A block whose preceding non-blank line is ``<!-- not run: REASON -->`` is
  skipped (it needs an LLM key, a running server, ...). Keep those few, and
  the reason honest.
* A block whose preceding non-blank line is ``<!-- needs: redis -->`` runs
  with ``REDISMEM_URL`` set to the test session's ``redis-server``; such a
  snippet must delete every key it writes (the suite checks).
* Every block that runs is followed by a line ``Output:`` and a
  ```` ```text ```` block: the script's stdout must equal it exactly
  (stderr, where the embedded backend warns, is not compared). A snippet
  that shows nothing prints what it shows.
* A deprecated call in a snippet fails it (``DeprecationWarning`` raised from
  ``__main__`` is an error), so the docs never teach an old form.

Blocks may be indented (inside a list item); the indentation is removed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from redismem.core import local

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->")
NEEDS = re.compile(r"<!-- needs: (\w+) -->")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
#: Each snippet must end within this many seconds (most take under one).
TIMEOUT = 120


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None  # the reason it is not run
    needs: str | None  # "redis": REDISMEM_URL is the suite's redis-server
    output: str | None  # the expected stdout

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _block(lines: list[str], start: int) -> tuple[str, str, str, int] | None:
    """The fenced block opening at ``lines[start]``: (language, indent, body,
    index of the closing fence), or None if the line opens none."""
    opening = FENCE.match(lines[start])
    if not opening or not opening.group(2):
        return None
    indent = opening.group(1)
    for end in range(start + 1, len(lines)):
        if lines[end].rstrip() == f"{indent}```":
            body = [line.removeprefix(indent) for line in lines[start + 1 : end]]
            return opening.group(2), indent, "".join(f"{line}\n" for line in body), end
    raise AssertionError(f"unclosed ``` block at line {start + 1}")


def _previous(lines: list[str], index: int) -> str:
    for line in reversed(lines[:index]):
        if line.strip():
            return line.strip()
    return ""


def _output(lines: list[str], after: int) -> str | None:
    """The ```text block announced by an ``Output:`` line right after
    ``lines[after]`` (blank lines allowed in between), or None."""
    index = after + 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    if index >= len(lines) or lines[index].strip() != "Output:":
        return None
    index += 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    found = _block(lines, index) if index < len(lines) else None
    assert found and found[0] == "text", f"'Output:' at line {index} must precede a ```text block"
    return found[2]


def snippets(path: Path) -> list[Snippet]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    index = 0
    while index < len(lines):
        block = _block(lines, index)
        if block is None:
            index += 1
            continue
        language, _, body, end = block
        if language == "python":
            before = _previous(lines, index)
            skip = NOT_RUN.fullmatch(before)
            needs = NEEDS.fullmatch(before)
            found.append(
                Snippet(
                    path=path,
                    line=index + 1,
                    code=body,
                    skip=skip.group(1) if skip else None,
                    needs=needs.group(1) if needs else None,
                    output=_output(lines, end),
                )
            )
        index = end + 1
    return found


ALL = [snippet for path in doc_files() for snippet in snippets(path)]
RUN = [snippet for snippet in ALL if snippet.skip is None]


def test_the_docs_have_snippets_and_few_are_skipped() -> None:
    assert len(RUN) >= 20, [s.name for s in RUN]
    skipped = [s.name for s in ALL if s.skip is not None]
    assert len(skipped) <= 6, skipped


@pytest.mark.parametrize("snippet", ALL, ids=[s.name for s in ALL])
def test_every_python_block_is_complete(snippet: Snippet) -> None:
    """A block that runs shows its output; a skipped one still parses and
    says why it is skipped."""
    compile(snippet.code, snippet.name, "exec")
    if snippet.skip is None:
        assert snippet.output is not None, (
            f"{snippet.name}: follow the block with 'Output:' and a ```text block "
            "holding what it prints"
        )
    assert snippet.needs in (None, "redis"), snippet.needs


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REDISMEM_", "PYTHON", "PYTEST", "COV_"))
    }
    env |= {
        "PYTHONPATH": str(ROOT),  # this checkout, not another installed copy
        "PYTHONUTF8": "1",
        "HOME": str(tmp_path),
    }
    return env


def _stop_local_servers(directory: Path) -> None:
    """A ``local://`` server keeps running after its processes exit: stop the snippet's."""
    for conf in directory.rglob("server.conf"):
        local.stop(conf.parent)


def run_snippet(snippet: Snippet, tmp_path: Path, redis_url: str | None = None) -> str:
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    env = _environment(tmp_path)
    if redis_url is not None:
        env["REDISMEM_URL"] = redis_url
    try:
        result = subprocess.run(
            [sys.executable, "-W", "error::DeprecationWarning:__main__", str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
    finally:
        _stop_local_servers(tmp_path)
    assert result.returncode == 0, f"{snippet.name} failed:\n{result.stderr}"
    return result.stdout


@pytest.mark.processes
@pytest.mark.parametrize(
    "snippet",
    [pytest.param(s, marks=[pytest.mark.redis] if s.needs == "redis" else []) for s in RUN],
    ids=[s.name for s in RUN],
)
def test_snippet_runs_and_prints_what_the_docs_show(
    snippet: Snippet, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if snippet.needs == "redis" else None
    stdout = run_snippet(snippet, tmp_path, redis_url)
    assert snippet.output is not None
    assert stdout == snippet.output, f"{snippet.name} printed:\n{stdout}"


# -- the harness itself --------------------------------------------------------


def test_the_harness_reads_markers_and_outputs(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro\n\n"
        "```python\nprint('a')\n```\n\nOutput:\n\n```text\na\n```\n\n"
        "<!-- not run: needs an LLM key -->\n```python\nimport nothing\n```\n\n"
        "<!-- needs: redis -->\n\n```python\nprint(1)\n```\n"
        "- a list item:\n\n  ```python\n  x = 1\n  ```\n",
        encoding="utf-8",
    )
    found = snippets(page)
    assert [(s.line, s.skip, s.needs, s.output) for s in found] == [
        (3, None, None, "a\n"),
        (14, "needs an LLM key", None, None),
        (20, None, "redis", None),
        (25, None, None, None),
    ]
    assert found[3].code == "x = 1\n"


def test_a_snippet_whose_output_differs_fails(tmp_path: Path) -> None:
    snippet = Snippet(ROOT / "README.md", 1, "print('8 keys removed')\n", None, None, "7\n")
    assert run_snippet(snippet, tmp_path) == "8 keys removed\n"
    broken = Snippet(ROOT / "README.md", 1, "await main()\n", None, None, "")
    with pytest.raises(AssertionError, match="failed"):
        run_snippet(broken, tmp_path)
    old = "from redismem import StoreError\n"  # a deprecated name
    with pytest.raises(AssertionError, match="DeprecationWarning"):
        run_snippet(Snippet(ROOT / "README.md", 1, old, None, None, ""), tmp_path)
