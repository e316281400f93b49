"""The figures of docs/benchmarks.md, rendered from the benches' JSON results.

Each bench writes its raw results with ``--json PATH`` (``bench/results/*.json``,
committed); this script only reads those files, so the plots can be redrawn
without running anything:

    .venv/bin/python bench/plots.py                      # bench/results -> docs/benchmarks
    .venv/bin/python bench/plots.py --results DIR --out DIR

=====================================  ==============================================
PNG                                    JSON (bench that writes it)
=====================================  ==============================================
read_latency_by_length.png             core.json (bench_core.py)
recall_at_k.png                        recall.json (bench_recall.py)
index_lag_cdf.png                      recall.json, fleet.json (bench_fleet.py)
cost_per_message.png                   fleet.json, recorded.json
search_latency_by_size.png             recall.json, recorded.json
=====================================  ==============================================

``recorded.json`` holds figures copied by hand from dated runs in
docs/benchmarks-history.md that are too costly to rerun here (the 1,000,000-message
index, the fleet on index format 1); each entry names its source.

The PNGs are reproducible: Agg backend, fixed size and resolution, no
timestamp or software tag in their metadata. Needs matplotlib
(``pip install 'redismem[plots]'``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OUT = ROOT / "docs" / "benchmarks"

SIZE = (8.0, 4.6)  # inches
DPI = 100
#: One colour per side, the same in every plot.
COLOURS = {
    "redismem": "#c0392b",
    "raw redis-py": "#7f8c8d",
    "LangChain": "#2980b9",
    "LlamaIndex": "#8e44ad",
    "plain BM25": "#7f8c8d",
}


class SchemaError(ValueError):
    """A results file lacks what a plot reads."""


# -- the results files and what each plot reads from them ---------------------------


def _get(data: dict[str, Any], path: str, kind: type | tuple[type, ...]) -> Any:
    value: Any = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise SchemaError(f"missing {path!r}")
        value = value[part]
    if not isinstance(value, kind):
        raise SchemaError(f"{path!r} is {type(value).__name__}, not {kind}")
    return value


def _numbers(values: Any, path: str, *, allow_none: bool = False) -> list[Any]:
    if not isinstance(values, list) or not values:
        raise SchemaError(f"{path!r} is not a non-empty list")
    for v in values:
        if v is None and allow_none:
            continue
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise SchemaError(f"{path!r} holds {v!r}")
    return values


def check_meta(data: dict[str, Any]) -> None:
    _get(data, "meta.date", str)
    _get(data, "meta.command", str)


def check_core(data: dict[str, Any]) -> None:
    check_meta(data)
    by_length = _get(data, "read_p50_ms_by_length", dict)
    if "redismem" not in by_length:
        raise SchemaError("read_p50_ms_by_length has no 'redismem'")
    for side, sizes in by_length.items():
        if not isinstance(sizes, dict) or not sizes:
            raise SchemaError(f"read_p50_ms_by_length.{side} is empty")
        _numbers([int(n) for n in sizes], f"read_p50_ms_by_length.{side} (sizes)")
        _numbers(list(sizes.values()), f"read_p50_ms_by_length.{side}")
    for name in ("write_latency_ms", "read_latency_ms", "sequential"):
        _get(data, name, dict)


def check_recall(data: dict[str, Any]) -> None:
    check_meta(data)
    positions = _get(data, "locomo.positions", dict)
    n = len(_numbers(positions.get("redismem"), "locomo.positions.redismem", allow_none=True))
    for side, values in positions.items():
        if len(_numbers(values, f"locomo.positions.{side}", allow_none=True)) != n:
            raise SchemaError(f"locomo.positions.{side}: not the same questions as redismem")
    _numbers(_get(data, "lag.samples_ms", list), "lag.samples_ms")
    _get(data, "lag.rate", float | int)
    for i, lat in enumerate(_get(data, "latency", list)):
        if not isinstance(lat, dict):
            raise SchemaError(f"latency[{i}] is not an object")
        for key in ("size", "p50_ms", "p99_ms"):
            _get(lat, key, int | float)


def check_fleet(data: dict[str, Any]) -> None:
    check_meta(data)
    _get(data, "written.messages", int)
    census = _get(data, "memory.census.bytes", dict)
    _numbers(list(census.values()), "memory.census.bytes")
    _numbers(_get(data, "lag.indexed_samples_ms", list), "lag.indexed_samples_ms")
    _get(data, "lag.steady_indexed_samples_ms", list)
    _get(data, "lag.steady_achieved_rate", float | int)
    _get(data, "throughput.fleet_messages_per_s", float | int)


def check_recorded(data: dict[str, Any]) -> None:
    for key in ("fleet_format1", "search_by_size"):
        entry = _get(data, key, dict)
        _get(entry, "source", str)
    _numbers(list(_get(data, "fleet_format1.bytes_per_message", dict).values()), "fleet_format1")
    for i, row in enumerate(_get(data, "search_by_size.rows", list)):
        for k in ("size", "p50_ms", "p99_ms"):
            if not isinstance(row, dict) or not isinstance(row.get(k), int | float):
                raise SchemaError(f"search_by_size.rows[{i}].{k} missing")


#: results file -> its check.
SCHEMAS: dict[str, Callable[[dict[str, Any]], None]] = {
    "core.json": check_core,
    "recall.json": check_recall,
    "fleet.json": check_fleet,
    "recorded.json": check_recorded,
}


def load(results: Path, name: str) -> dict[str, Any]:
    """``results/name`` parsed and checked against what the plots read."""
    path = results / name
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SchemaError(f"{path}: not found (run its bench with --json {path})") from None
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: not a JSON object")
    try:
        SCHEMAS[name](data)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None
    return data


# -- matplotlib -----------------------------------------------------------------------


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported on first use."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("bench/plots.py needs matplotlib: pip install 'redismem[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "legend.frameon": False,
            "svg.hashsalt": "redismem",
        }
    )
    return plt


def save(fig: Any, path: Path) -> None:
    # No "Software" or date in the PNG: a rerun on the same data is byte for byte the same.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    fig.clf()
    pyplot().close(fig)


def caption(fig: Any, *lines: str) -> None:
    wrapped = [part for line in lines for part in textwrap.wrap(line, 125)]
    fig.text(0.01, 0.01, "\n".join(wrapped), fontsize=7.5, color="#555555", va="bottom")


def _source(data: dict[str, Any]) -> str:
    """The bench's command (without where its files go), date and load average."""
    meta = data["meta"]
    words = shlex.split(meta["command"])[1:]
    shown = [
        w
        for i, w in enumerate(words)
        if w not in ("--json", "--data") and (i == 0 or words[i - 1] not in ("--json", "--data"))
    ]
    load_avg = meta.get("load_average") or []
    loadtxt = f", load average {load_avg[1]:.1f}" if load_avg else ""
    return f"{shlex.join(shown)} ({meta['date']}{loadtxt})"


# -- the plots ------------------------------------------------------------------------


def _load(data: dict[str, Any]) -> float:
    """The 5-minute load average when the bench ended (0 when not recorded)."""
    load_avg = data["meta"].get("load_average") or [0.0, 0.0]
    return float(load_avg[1])


def read_latency_by_length(results: Path, out: Path) -> Path:
    core = load(results, "core.json")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE)
    for side, by_size in core["read_p50_ms_by_length"].items():
        sizes = sorted(by_size, key=int)
        ax.plot(
            [int(n) for n in sizes],
            [by_size[n] for n in sizes],
            marker="o",
            label=side,
            color=COLOURS.get(side),
            linewidth=2.2 if side == "redismem" else 1.4,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages in the session")
    ax.set_ylabel("p50 of one read of the last 50 (ms)")
    ax.set_title("Reading the last 50 messages, by session length")
    ax.legend(loc="upper left")
    fig.subplots_adjust(bottom=0.24)
    caption(
        fig,
        "Peers load the whole session per read; redismem and raw redis-py read the last 50.",
        _source(core),
    )
    path = out / "read_latency_by_length.png"
    save(fig, path)
    return path


def recall_curve(positions: list[int | None], ks: range) -> list[float]:
    n = len(positions)
    return [sum(1 for p in positions if p is not None and p <= k) / n for k in ks]


def recall_at_k(results: Path, out: Path) -> Path:
    recall = load(results, "recall.json")
    positions = recall["locomo"]["positions"]
    ks = range(1, 21)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE)
    for side, pos in positions.items():
        curve = recall_curve(pos, ks)
        ax.plot(list(ks), curve, label=side, color=COLOURS.get(side), marker=".")
        for k in (5, 10, 20):
            ax.annotate(
                f"{curve[k - 1]:.3f}",
                (k, curve[k - 1]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
                color=COLOURS.get(side),
            )
    ax.axhline(0.75, color="#27ae60", linestyle="--", linewidth=1)
    ax.text(20, 0.72, "goal: 0.75 at k = 10", fontsize=8, color="#27ae60", ha="right", va="top")
    ax.set_xticks([1, 5, 10, 15, 20])
    ax.set_ylim(0, 1)
    ax.set_xlabel("k (results returned)")
    ax.set_ylabel("questions with an evidence turn in the top k")
    n = len(positions["redismem"])
    ax.set_title(f"LoCoMo evidence recall@k ({n} questions, 4 conversations)")
    ax.legend(loc="lower right")
    fig.subplots_adjust(bottom=0.24)
    caption(
        fig,
        "redismem: Memory.search over what 2 real workers indexed; plain BM25: single turns,"
        " same questions (locomo_offline.py).",
        _source(recall),
    )
    path = out / "recall_at_k.png"
    save(fig, path)
    return path


def _cdf(ax: Any, samples: list[float], label: str, **style: Any) -> None:
    xs = sorted(samples)
    n = len(xs)
    ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=label, **style)


def index_lag_cdf(results: Path, out: Path) -> Path:
    recall = load(results, "recall.json")
    fleet = load(results, "fleet.json")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(SIZE[0], SIZE[1] + 1))
    lag = recall["lag"]
    _cdf(
        ax,
        lag["samples_ms"],
        f"bench_recall: {lag['rate']:,.0f} writes/s, 2 workers (n={len(lag['samples_ms']):,})",
        color=COLOURS["redismem"],
        linewidth=2,
    )
    fl = fleet["lag"]
    if fl["steady_indexed_samples_ms"]:
        _cdf(
            ax,
            fl["steady_indexed_samples_ms"],
            f"bench_fleet, steady: {fl['steady_achieved_rate']:,.0f} msg/s, every feature on"
            f" (n={len(fl['steady_indexed_samples_ms']):,})",
            color="#2980b9",
        )
    _cdf(
        ax,
        fl["indexed_samples_ms"],
        f"bench_fleet, fleet phase: {fleet['throughput']['fleet_messages_per_s']:,.0f} msg/s"
        f" written, more than the workers index (n={len(fl['indexed_samples_ms']):,})",
        color="#2980b9",
        linestyle=":",
    )
    delay = lag.get("delay_s", 1.0)
    ax.axvline(delay * 1000, color="#555555", linestyle="--", linewidth=1)
    ax.text(delay * 1000, 0.97, f" jobs' quiet period ({delay:g} s)", fontsize=8, color="#555555")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("write returned → indexed (ms, log scale)")
    ax.set_ylabel("fraction of writes")
    ax.set_title("Index lag: from write to searchable")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), fontsize=8, ncols=1)
    fig.subplots_adjust(bottom=0.42, top=0.93)
    caption(
        fig,
        "bench_recall: found by Memory.search; bench_fleet: the session's index watermark"
        " (sampled every 100 ms).",
        _source(recall),
        _source(fleet),
    )
    path = out / "index_lag_cdf.png"
    save(fig, path)
    return path


#: Census families (bench_fleet.py) grouped by the feature that pays for them.
FEATURES = (
    ("session copy", ("session list", "entries", "write ids", "meta", "session tags", "user ")),
    ("recall index", ("index",)),
    ("summaries", ("summary",)),
    ("long-term memories", ("memories",)),
    ("queue", ("queue", "other")),
)
FEATURE_COLOURS = ("#c0392b", "#2980b9", "#f39c12", "#27ae60", "#7f8c8d")


def by_feature(bytes_by_family: dict[str, float], messages: int) -> dict[str, float]:
    """Bytes per message written, summed by feature."""
    out = dict.fromkeys((f for f, _ in FEATURES), 0.0)
    for family, size in bytes_by_family.items():
        feature = next(
            (f for f, prefixes in FEATURES if family.startswith(prefixes)),
            "queue",
        )
        out[feature] += size / messages
    return out


def cost_per_message(results: Path, out: Path) -> Path:
    fleet = load(results, "fleet.json")
    recorded = load(results, "recorded.json")["fleet_format1"]
    written = fleet["written"]
    rows = [
        (
            f"index format 2\n{written['messages']:,} msgs,"
            f" {written['messages'] // written['users']:,}/user\n{fleet['meta']['date'][:10]}",
            by_feature(fleet["memory"]["census"]["bytes"], written["messages"]),
        ),
        (
            f"index format 1\n{recorded['messages']:,} msgs,"
            f" {recorded['messages'] // recorded['users']:,}/user\n{recorded['date']} (recorded)",
            recorded["bytes_per_message"],
        ),
    ]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE)
    for y, (_label, parts) in enumerate(rows):
        left = 0.0
        for (feature, _), colour in zip(FEATURES, FEATURE_COLOURS, strict=True):
            width = parts.get(feature, 0.0)
            ax.barh(
                y, width, left=left, height=0.5, color=colour, label=feature if y == 0 else None
            )
            if width >= 0.1 * max(sum(p.values()) for _, p in rows):
                ax.text(
                    left + width / 2,
                    y,
                    f"{width:,.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
            left += width
        ax.text(left, y, f"  {left:,.0f} B", va="center", fontsize=9)
        ax.text(
            0,
            y + 0.36,
            ",  ".join(f"{f} {parts.get(f, 0.0):,.0f}" for f, _ in FEATURES),
            va="top",
            fontsize=7.5,
            color="#333333",
        )
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_ylim(len(rows) - 0.4, -0.5)  # top to bottom, room for each breakdown line
    ax.set_xlabel("Redis bytes per message written (MEMORY USAGE, by key family)")
    ax.set_title("Cost per message by feature, every feature on")
    ax.set_xlim(0, max(sum(p.values()) for _, p in rows) * 1.18)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, ncols=5)
    ax.grid(axis="y", visible=False)
    fig.subplots_adjust(left=0.25, bottom=0.36)
    caption(
        fig,
        "Summaries with compaction (keep_recent=20), rule extractor, 2 workers.",
        _source(fleet),
        f"Format 1 row: {recorded['source']}.",
    )
    path = out / "cost_per_message.png"
    save(fig, path)
    return path


def search_latency_by_size(results: Path, out: Path) -> Path:
    recall = load(results, "recall.json")
    recorded = load(results, "recorded.json")["search_by_size"]
    goals = {10_000: 2.0, 100_000: 10.0, 1_000_000: 50.0}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE)
    rows = recorded["rows"]
    sizes = [r["size"] for r in rows]
    ax.plot(
        sizes,
        [r["p50_ms"] for r in rows],
        marker="o",
        color="#2980b9",
        label=f"p50, recorded {recorded['date']}",
    )
    ax.plot(
        sizes,
        [r["p99_ms"] for r in rows],
        marker="o",
        color="#2980b9",
        linestyle=":",
        label="p99, recorded",
    )
    fresh = recall["latency"]
    if fresh:
        ax.plot(
            [r["size"] for r in fresh],
            [r["p50_ms"] for r in fresh],
            marker="s",
            linestyle="none",
            color=COLOURS["redismem"],
            markersize=8,
            label=f"p50, this run ({recall['meta']['date'][:10]}, load {_load(recall):.1f})",
        )
        ax.plot(
            [r["size"] for r in fresh],
            [r["p99_ms"] for r in fresh],
            marker="s",
            linestyle="none",
            color=COLOURS["redismem"],
            fillstyle="none",
            markersize=8,
            label="p99, this run",
        )
    ax.plot(
        list(goals),
        list(goals.values()),
        marker="_",
        markersize=22,
        linestyle="none",
        color="#27ae60",
        markeredgewidth=2,
        label="goal for p50",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages indexed for one user")
    ax.set_ylabel("one search (ms, client side)")
    ax.set_title("Search latency by index size (index format 2)")
    ax.legend(loc="upper left", fontsize=8)
    fig.subplots_adjust(bottom=0.24)
    caption(fig, f"Recorded: {recorded['source']}.", _source(recall))
    path = out / "search_latency_by_size.png"
    save(fig, path)
    return path


PLOTS: tuple[Callable[[Path, Path], Path], ...] = (
    read_latency_by_length,
    recall_at_k,
    index_lag_cdf,
    cost_per_message,
    search_latency_by_size,
)


def render(results: Path = RESULTS, out: Path = OUT) -> list[Path]:
    """Every PNG, from the JSON files in ``results``, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    return [plot(results, out) for plot in PLOTS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the benches' JSON files")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go")
    args = parser.parse_args(argv)
    try:
        paths = render(args.results, args.out)
    except SchemaError as exc:
        print(f"plots: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
