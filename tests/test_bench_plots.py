"""bench/plots.py: every figure of docs/benchmarks.md renders from the committed JSON.

No benchmark runs here: the plots are drawn from ``bench/results/*.json``
(what the benches write with ``--json``) into a temporary directory.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "plots.py"
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _plots() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_plots", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plots = _plots()
NAMES = [f"{plot.__name__}.png" for plot in plots.PLOTS]


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, body) of every chunk of a PNG."""
    out, at = [], len(PNG_SIGNATURE)
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        out.append((data[at + 4 : at + 8], data[at + 8 : at + 8 + length]))
        at += 12 + length
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plots")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_renders_every_png_from_the_committed_json(rendered: Path) -> None:
    assert sorted(p.name for p in rendered.iterdir()) == sorted(NAMES)
    for name in NAMES:
        data = (rendered / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        assert len(data) > 20_000, f"{name}: {len(data)} bytes, too small to be a plot"
        kinds = [kind for kind, _ in _chunks(data)]
        assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND", name
        # No software tag or date: a rerun on the same data does not churn the file.
        texts = [body for kind, body in _chunks(data) if kind in (b"tEXt", b"iTXt", b"tIME")]
        assert texts == [], f"{name}: {texts}"


def test_every_png_the_doc_shows_exists_and_every_plot_is_shown() -> None:
    shown = re.findall(r"\]\((benchmarks/[^)]+\.png)\)", DOC.read_text())
    assert shown, "docs/benchmarks.md shows no plot"
    for rel in shown:
        assert (DOC.parent / rel).is_file(), f"docs/benchmarks.md shows {rel}: missing"
    assert sorted(Path(rel).name for rel in set(shown)) == sorted(NAMES)


def test_the_committed_pngs_are_the_ones_plots_makes() -> None:
    committed = sorted(p.name for p in (DOC.parent / "benchmarks").glob("*.png"))
    assert committed == sorted(NAMES)


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_results_file_has_the_schema_plots_reads(path: Path) -> None:
    assert path.name in plots.SCHEMAS, f"{path.name}: no plot reads it (add its schema)"
    plots.load(RESULTS, path.name)


def test_every_schema_has_its_results_file() -> None:
    assert sorted(plots.SCHEMAS) == sorted(p.name for p in RESULTS.glob("*.json"))


def test_a_results_file_missing_a_field_is_named(tmp_path: Path) -> None:
    data = json.loads((RESULTS / "recall.json").read_text())
    del data["lag"]["samples_ms"]
    (tmp_path / "recall.json").write_text(json.dumps(data))
    with pytest.raises(plots.SchemaError, match=r"recall\.json: missing 'lag\.samples_ms'"):
        plots.load(tmp_path, "recall.json")


def test_without_matplotlib_one_line_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        f"sys.argv = ['plots.py', '--out', {str(tmp_path)!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("bench/plots.py needs matplotlib: pip install 'redismem[plots]'")
    assert list(tmp_path.iterdir()) == []


def _bench_module(name: str) -> ModuleType:
    """A bench script as a module (the benches import their siblings by name)."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location(
            f"bench_{name}_under_test", SCRIPT.parent / f"{name}.py"
        )
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPT.parent))


def _with_meta(results: dict[str, object]) -> dict[str, object]:
    return {"meta": {"date": "2026-12-02 16:00 UTC", "command": "python bench/x.py"}, **results}


def test_what_bench_core_writes_is_what_plots_reads() -> None:
    core = _bench_module("bench_core")
    res = core.Results(
        write_lat={"redismem": (0.1, 0.2), "raw redis-py": (0.1, 0.2)},
        read_lat={"redismem": (0.4, 0.6), "raw redis-py": (0.3, 0.5)},
        seq={"redismem": (7000.0, 2000.0), "LangChain": (6000.0, 12.0)},
        by_length={"redismem": {10: 0.4, 10_000: 0.45}, "LangChain": {10: 0.4, 10_000: 300.0}},
    )
    data = json.loads(json.dumps(core.results_json(res, core.QUICK, "here")))
    plots.check_core(_with_meta(data))
    assert data["read_p50_ms_by_length"]["LangChain"] == {"10": 0.4, "10000": 300.0}


def test_what_bench_recall_writes_is_what_plots_reads() -> None:
    recall = _bench_module("bench_recall")
    res = recall.Results(
        locomo=recall.LocomoResult(
            {"conv-1": [(1, 3), (4, 10**9)]},
            turns=10,
            index_seconds=1.0,
            baseline={"conv-1": [7, 10**9]},
        ),
        latency=[recall.LatencyResult(10_000, 2.0, 9.0, 3.0, 1.0, 1.0, 5.0, 9.6)],
        lag=recall.LagResult(rate=500.0, followed=3, lags_ms=[900.0, 600.0], lost=1, delay=1.0),
    )
    data = json.loads(json.dumps(recall.results_json(res)))
    plots.check_recall(_with_meta(data))
    assert data["locomo"]["positions"] == {"redismem": [3, None], "plain BM25": [7, None]}
    assert data["lag"]["samples_ms"] == [600.0, 900.0]
