"""The wheel installs ``redismem`` alone: no top-level ``workers`` (or any other
generic module) that would clash with the user's code, and the package data
the library needs at run time."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # pip builds the wheel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # Built from a copy of the sources, so the build leaves nothing in the
    # checkout (and the checkout's top-level workers/ is there to be left out).
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("redismem", "workers"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    out = tmp / "dist"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [built] = out.glob("redismem-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_only_redismem(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/", 1)[0] for name in wheel.namelist()}
    strays = {t for t in top if t != "redismem" and not re.fullmatch(r"redismem-.+\.dist-info", t)}
    assert strays == set()
    assert "redismem" in top


def test_the_wheel_holds_the_package_data_and_the_workers(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert "redismem/py.typed" in names
    scripts = {Path(n).name for n in names if n.startswith("redismem/lua/")}
    shipped = {p.name for p in (ROOT / "redismem" / "lua").glob("*.lua")}
    assert shipped and scripts == shipped
    for module in ("__init__", "settings", "jobs", "health", "run", "inprocess"):
        assert f"redismem/workers/{module}.py" in names


def test_the_checkout_entry_point_is_thin() -> None:
    """``workers/`` re-exports arq's settings from ``redismem.workers``, nothing else."""
    files = sorted(p.name for p in (ROOT / "workers").iterdir() if p.name != "__pycache__")
    assert files == ["__init__.py"]
    source = (ROOT / "workers" / "__init__.py").read_text()
    assert "from redismem.workers import WorkerSettings" in source
