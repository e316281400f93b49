"""Keyword + vector fusion on LoCoMo, offline: tunes how ``Memory.search``
fuses the keyword ranking with an embedder's (``recall._fused``).

For every question: the keyword ranking (``redismem.recall.ranking``, as
``locomo_offline.py`` builds it), the vector ranking of a candidate pool
(the best keyword matches plus the newest turns, as production bounds it),
and their weighted reciprocal rank fusion, over a grid of weights, fusion
constants and pool sizes. Prints evidence recall@10 for each point, best
first. Needs the ``embeddings`` extra (``minilm``); the embeddings are
computed once per run (about a minute on 2 CPUs).

    .venv/bin/python bench/locomo_fusion.py [--data ../shared/data/locomo]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _locomo import DEFAULT_DATA, Conversation, load
from locomo_offline import _indexes, build_index, first_hit

from redismem.recall import ranking
from redismem.recall.embeddings import MiniLMEmbedder

KEYWORD_POOL = 50


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    args = parser.parse_args(argv)
    convs: list[Conversation] = load(Path(args.data))
    embedder = MiniLMEmbedder()
    params = ranking.Params()
    started = time.monotonic()
    prepared = []
    for conv in convs:
        idx = build_index(conv, params)
        _indexes.clear()
        turn_vectors = await embedder.embed([t.content for t in conv.turns])
        question_vectors = await embedder.embed([q.text for q in conv.questions])
        n = len(conv.turns)
        for q, qv in zip(conv.questions, question_vectors, strict=True):
            keyword = [
                d
                for d, _ in ranking.rank(
                    q.text, idx.postings, n, idx.links, KEYWORD_POOL, params=params
                )
            ]
            sims = {d: dot(qv, turn_vectors[d - 1]) for d in range(1, n + 1)}
            prepared.append((keyword, sims, n, q.evidence, idx.dia))
    print(f"embedded and ranked in {time.monotonic() - started:.0f} s", file=sys.stderr)

    results = []
    weights = sorted({0.0, 0.2, ranking.VECTOR_WEIGHT, 0.5, 0.75, 1.0})
    for weight, k, recent in itertools.product(weights, (10, 30, ranking.RRF_K), (200, 10**6)):
        hits = []
        for keyword, sims, n, evidence, dia in prepared:
            pool = set(keyword) | set(range(max(1, n - recent + 1), n + 1))
            by_vector = sorted(pool, key=lambda d: sims[d], reverse=True)
            fused: dict[int, float] = {}
            for rank_, d in enumerate(keyword):
                fused[d] = fused.get(d, 0.0) + 1.0 / (k + rank_ + 1)
            if weight:
                for rank_, d in enumerate(by_vector):
                    fused[d] = fused.get(d, 0.0) + weight / (k + rank_ + 1)
            ranked = sorted(fused, key=lambda d: fused[d], reverse=True)[:10]
            hits.append(first_hit(ranked, evidence, dia) <= 10)
        results.append((sum(hits) / len(hits), weight, k, recent))
    print("recall@10  vector weight  rrf k  recent pool")
    for score, weight, k, recent in sorted(results, reverse=True):
        pool = "all" if recent >= 10**6 else str(recent)
        print(f"{score:9.3f}  {weight:13.2f}  {k:5d}  {pool:>11}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
