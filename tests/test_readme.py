"""The README's runnable snippets (those ending in ``asyncio.run(main())``) run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    if "asyncio.run(main())" in block
]


def test_the_readme_has_runnable_snippets() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.processes
@pytest.mark.parametrize("code", BLOCKS, ids=[f"snippet-{i}" for i in range(len(BLOCKS))])
def test_readme_snippet_runs(code: str, tmp_path: Path) -> None:
    # A fresh interpreter per snippet: each runs exactly as a user would paste it.
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    env_free = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_free,
        check=False,
    )
    assert result.returncode == 0, result.stderr
