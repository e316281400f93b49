"""The index-time analysis as of 834c88b, frozen for ``bench_indexing.py``'s
old-against-new comparison: ``terms`` tokenizing and filtering every token of
every text, and ``doc_weights`` analysing each message again as context of
the next ``context_turns`` ones. ``stem`` (unchanged since) is the library's."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from redismem.recall import bm25
from redismem.recall.ranking import DEFAULT, Params, date_text
from redismem.recall.terms import (
    _APOSTROPHES,
    _ASCII_WORD_RE,
    _CLITICS,
    _ORDINAL_RE,
    _TOKEN_RE,
    STOP_WORDS,
    stem,
)


def terms(text: str) -> list[str]:
    out: list[str] = []
    norm = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold()
    for tok in _TOKEN_RE.findall(norm):
        if tok in STOP_WORDS:
            continue
        if "'" in tok:
            head, _, tail = tok.rpartition("'")
            if tail in _CLITICS:
                continue
            tok = (head if tail == "s" else tok).replace("'", "")
            if tok in STOP_WORDS:
                continue
        if tok[0].isdigit():
            if "," in tok:
                tok = tok.replace(",", "")
            m = _ORDINAL_RE.match(tok)
            tok = m.group(1) if m else tok
        elif _ASCII_WORD_RE.match(tok):
            tok = stem(tok)
        if tok and tok not in STOP_WORDS:
            out.append(tok)
    return out


def _tf_weights(text_terms: Sequence[str], p: Params) -> dict[str, float]:
    dl = len(text_terms)
    return {
        t: bm25.score(n, dl, p.avg_doc_len, k1=p.k1, b=p.b) for t, n in Counter(text_terms).items()
    }


def doc_weights(
    content: str,
    name: str | None = None,
    previous: Sequence[str] = (),
    params: Params = DEFAULT,
    created: datetime | None = None,
) -> dict[str, float]:
    weights = _tf_weights(terms(content), params)
    if name and params.name_weight > 0.0:
        for t in terms(name):
            weights[t] = max(weights.get(t, 0.0), params.name_weight)
    if created is not None and params.date_weight > 0.0:
        for t in terms(date_text(created)):
            weights[t] = max(weights.get(t, 0.0), params.date_weight)
    scale = params.context_weight
    for prev_text in list(reversed(previous))[: params.context_turns]:
        if scale <= 0.0:
            break
        for t, w in _tf_weights(terms(prev_text), params).items():
            cw = scale * w
            if cw > weights.get(t, 0.0):
                weights[t] = cw
        scale *= params.context_decay
    return weights
