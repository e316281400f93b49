"""Keyword recall on LoCoMo, offline: evidence recall@5/10/20 of ``redismem.recall.ranking``.

Simulates what production does, without Redis: each conversation is one user;
its turns are indexed one by one in session order (a doc sees only the earlier
turns of its session), then every question (categories 1-4 with evidence) is
ranked by ``ranking.rank``. A plain BM25 over single turns runs in the same
pass as the baseline.

    .venv/bin/python bench/locomo_offline.py [--data ../shared/data/locomo] [--cv]

``--cv`` adds a leave-one-conversation-out check of the constants: for each
conversation, pick the best grid point on the other three, score it on the
held-out one.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from _locomo import CATEGORIES, DEFAULT_DATA, KS, Conversation, load

from redismem.recall import ranking
from redismem.recall.ranking import DocLinks, Params


@dataclass
class Index:
    """One user's postings and doc data, as the Redis keys would hold them."""

    postings: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    links: dict[int, DocLinks] = field(default_factory=dict)
    dia: dict[int, str] = field(default_factory=dict)


def build_index(conv: Conversation, params: Params) -> Index:
    idx = Index()
    previous: list[str] = []
    prev_doc: int | None = None
    session = None
    for docid, turn in enumerate(conv.turns, start=1):
        if turn.session != session:
            session, previous, prev_doc = turn.session, [], None
        for t, w in ranking.doc_weights(
            turn.content, turn.name, previous, params, created=turn.created
        ).items():
            idx.postings[t].append((docid, w))
        idx.links[docid] = DocLinks(prev=prev_doc, next=None, name=turn.name)
        if prev_doc is not None:  # the next message fills in its predecessor's link
            idx.links[prev_doc] = replace(idx.links[prev_doc], next=docid)
        idx.dia[docid] = turn.dia_id
        previous.append(turn.content)
        prev_doc = docid
    return idx


def first_hit(ranked: Sequence[int], evidence: frozenset[str], dia: dict[int, str]) -> int:
    """1-based position of the first evidence turn, or a large number."""
    for pos, d in enumerate(ranked, start=1):
        if dia[d] in evidence:
            return pos
    return 10**9


_QUERY_ONLY: dict[str, Any] = {
    "max_postings": 0,
    "prev_alpha": 0.0,
    "next_beta": 0.0,
    "speaker_boost": 0.0,
}
_indexes: dict[tuple[str, Params], Index] = {}


def run_ranking(conv: Conversation, params: Params) -> list[int]:
    key = (conv.sample, replace(params, **_QUERY_ONLY))
    idx = _indexes.get(key) or _indexes.setdefault(key, build_index(conv, params))
    n = len(conv.turns)
    k = max(KS)
    return [
        first_hit(
            [d for d, _ in ranking.rank(q.text, idx.postings, n, idx.links, k, params=params)],
            q.evidence,
            idx.dia,
        )
        for q in conv.questions
    ]


# --- baseline: plain BM25 over single turns -----------------------------------------

_BASE_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_BASE_STOP = frozenset(
    re.findall(
        r"\S+",
        """a an and are as at be but by for from has have he her his i in is it its
        me my of on or our she so that the their them they this to was we were what
        when where which who will with you your""",
    )
)


def _base_terms(text: str) -> list[str]:
    return [w for w in _BASE_WORD.findall(text.lower()) if w not in _BASE_STOP]


def run_baseline(conv: Conversation, k1: float = 0.9, b: float = 0.4) -> list[int]:
    """BM25 (Lucene's k1/b) over ``speaker: text [shares: caption]`` of each turn,
    real average length: what the data README's 0.637 recall@10 measures."""
    docs = [Counter(_base_terms(f"{t.name}: {t.content}")) for t in conv.turns]
    lens = [sum(d.values()) for d in docs]
    avgdl = sum(lens) / len(lens)
    df: Counter[str] = Counter(t for d in docs for t in d)
    n = len(docs)
    dia = {i: t.dia_id for i, t in enumerate(conv.turns)}
    hits = []
    for q in conv.questions:
        qt = set(_base_terms(q.text))
        scores = []
        for i, d in enumerate(docs):
            s = 0.0
            for t in qt:
                tf = d.get(t, 0)
                if tf:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens[i] / avgdl))
            if s > 0:
                scores.append((s, i))
        scores.sort(reverse=True)
        hits.append(first_hit([i for _, i in scores[: max(KS)]], q.evidence, dia))
    return hits


# --- reporting ------------------------------------------------------------------------


def recall(hits: Iterable[int], k: int) -> float:
    h = list(hits)
    return sum(p <= k for p in h) / len(h) if h else float("nan")


def fmt(hits: Sequence[int]) -> str:
    return "  ".join(f"{recall(hits, k):.3f}" for k in KS) + f"  (n={len(hits)})"


def report(label: str, convs: Sequence[Conversation], per_conv: Sequence[list[int]]) -> None:
    print(f"\n== {label}   recall@{'/'.join(map(str, KS))}")
    every = [h for hs in per_conv for h in hs]
    print(f"  {'overall':<14}{fmt(every)}")
    for conv, hs in zip(convs, per_conv, strict=True):
        print(f"  {conv.sample:<14}{fmt(hs)}")
    cats: dict[int, list[int]] = defaultdict(list)
    for conv, hs in zip(convs, per_conv, strict=True):
        for q, h in zip(conv.questions, hs, strict=True):
            cats[q.category].append(h)
    for c in sorted(cats):
        print(f"  {f'{c} {CATEGORIES[c]}':<14}{fmt(cats[c])}")


# --- leave-one-conversation-out -------------------------------------------------------

# Around the defaults, one step either side; 18 points, ~25 s. (The constants
# were chosen by a wider search: coordinate ascent over all ten, run inside
# each leave-one-out fold; it picked the same region.)
GRID: dict[str, Sequence[Any]] = {
    "context_weight": (0.5, 0.7, 0.85),
    "next_beta": (0.2, 0.4, 0.6),
    "speaker_boost": (0.5, 1.0),
}


def objective(hits: Sequence[int]) -> float:
    return sum(recall(hits, k) for k in KS) / len(KS)


def loco(convs: Sequence[Conversation], base: Params, grid: dict[str, Sequence[Any]]) -> None:
    names = list(grid)
    points = [
        replace(base, **dict(zip(names, vals, strict=True)))
        for vals in itertools.product(*(grid[n] for n in names))
    ]
    table = [[run_ranking(c, p) for c in convs] for p in points]

    def pooled(pi: int, leave_out: int | None = None) -> list[int]:
        return [h for ci, hs in enumerate(table[pi]) if ci != leave_out for h in hs]

    print(f"\n== leave-one-conversation-out over {len(points)} grid points ({', '.join(names)})")
    held: list[int] = []
    for ci, conv in enumerate(convs):
        best = max(range(len(points)), key=lambda pi: objective(pooled(pi, ci)))
        chosen = ", ".join(f"{n}={getattr(points[best], n)}" for n in names)
        print(f"  held out {conv.sample:<9}{fmt(table[best][ci])}   picked {chosen}")
        held.extend(table[best][ci])
    print(f"  {'LOCO pooled':<18}{fmt(held)}")
    default = points.index(base) if base in points else None
    if default is not None:
        print(f"  {'defaults, all':<18}{fmt(pooled(default))}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cv", action="store_true", help="leave-one-conversation-out check")
    args = parser.parse_args(argv)
    if not args.data.is_dir() or not any(args.data.glob("*.json")):
        print(f"skipped: no LoCoMo data at {args.data}")
        return 0
    started = time.perf_counter()
    convs = load(args.data)
    print(
        f"{len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
        f"{sum(len(c.questions) for c in convs)} questions"
    )
    report("plain BM25 over turns (baseline)", convs, [run_baseline(c) for c in convs])
    report("redismem.recall.ranking defaults", convs, [run_ranking(c, Params()) for c in convs])
    if args.cv:
        loco(convs, Params(), GRID)
    print(f"\n{time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
