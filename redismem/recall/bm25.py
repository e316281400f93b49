"""BM25, the one keyword-relevance formula of the library, with its parameters explicit.

Recall (``recall.ranking``: ``k1=1.2, b=0.2``, tuned on LoCoMo) and the
long-term store's search (``longterm.store``: ``k1=1.2, b=0.75``, the
textbook values) both score through ``score`` and ``idf``; each passes its own
parameters. Recall folds the length part into a message's postings at index
time (``idf`` comes at query time, in Lua); the store scores at query time::

    score(tf, dl) = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    idf(df, n) = log(1 + (n - df + 0.5) / (df + 0.5))      never negative

``tf``: the term's count in the document, ``dl``: the document's length in
terms, ``avgdl``: the typical length, ``df``: the documents holding the term,
``n``: all documents.
"""

from __future__ import annotations

import math

__all__ = ["idf", "score"]


def score(
    tf: float, doc_len: float, avg_doc_len: float, *, k1: float, b: float, idf: float = 1.0
) -> float:
    """One term's BM25 score in one document; ``idf`` 1.0 gives the
    term-frequency part alone (recall's index-time weight)."""
    return idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * doc_len / avg_doc_len))


def idf(df: float, n: float) -> float:
    """BM25 idf, never negative: ``log(1 + (n - df + 0.5) / (df + 0.5))``."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))
