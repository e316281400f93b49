"""Keyword ranking for recall: index-time weights and the query-time algorithm.

Everything here is pure: no Redis. The indexer weighs each message once
(``doc_weights``; a session's messages in a row: ``ContextWeigher``, which
analyses each text once), and the weights are frozen into the postings, never
recomputed; the query path (one Lua call) mirrors ``rank`` line by line;
tests compare the two.

Index time (Python, per message, from the message alone plus the previous
messages of its session):

    bm25(t, text) = tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / AVG_DOC_LEN))
                    tf = count of t in terms(text), dl = len(terms(text))
                    (``bm25.score``, the store's formula too, with recall's K1 and B)
    weight(t) = max of
        bm25(t, content)                                   the message itself
        NAME_WEIGHT       when t in terms(name)            the speaker
        DATE_WEIGHT       when t in terms(date_text(created))   "8 May 2023"
        CONTEXT_WEIGHT * CONTEXT_DECAY**(j-1) * bm25(t, previous[-j])
                          for j = 1 .. CONTEXT_TURNS       earlier messages
    postings(t): sorted set member=docid score=weight(t)

Query time (one Lua call; ``rank`` is the reference):

    1. qw = query_terms(query)           # term -> query weight, from Python
    2. N = number of docs of the user
       for each term t in qw:
           df = ZCARD postings(t); skip when 0
           w_t = qw[t] * idf(df, N)      # bm25.idf: log(1 + (N - df + 0.5) / (df + 0.5))
           for (doc, weight) in ZREVRANGE postings(t) 0 MAX_POSTINGS-1 WITHSCORES:
               base[doc] = base[doc] + w_t * weight
    3. candidates = the docs of base, plus prev(d) and next(d) of each
       (skip this widening when PREV_ALPHA and NEXT_BETA are both 0)
    4. for each candidate d that the caller's filters accept (role, tags,
       time, session...; neighbours are read whether accepted or not):
           s = base[d] (0 when absent)
               + PREV_ALPHA * base[prev(d)] + NEXT_BETA * base[next(d)]
                 (a missing link or a neighbour absent from base adds 0)
           if some term of terms(name(d)) is a key of qw:
               s = s * (1 + SPEAKER_BOOST)
           keep d when s > 0
    5. the top k by s, ties by the higher docid (the newer message) first.

Only sums, products and ``math.log`` of numbers Lua already has: the query
weights are computed in Python and passed as ARGV next to their terms.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from redismem.recall import bm25
from redismem.recall.bm25 import idf
from redismem.recall.terms import terms

__all__ = [
    "AVG_DOC_LEN",
    "B",
    "CONTEXT_DECAY",
    "CONTEXT_TURNS",
    "CONTEXT_WEIGHT",
    "DATE_WEIGHT",
    "K1",
    "MAX_POSTINGS",
    "MAX_WEIGHT",
    "NAME_WEIGHT",
    "NEXT_BETA",
    "PREV_ALPHA",
    "SPEAKER_BOOST",
    "WEIGHT_LEVELS",
    "ContextWeigher",
    "DocLinks",
    "Params",
    "date_text",
    "dequantize_weight",
    "doc_weights",
    "idf",
    "quantize_weight",
    "query_terms",
    "rank",
    "session_doc_weights",
]

# Chosen on LoCoMo (4 conversations, 582 questions) by coordinate ascent and
# checked leave-one-conversation-out: every fold picked these values or a
# neighbour of them; see bench/locomo_offline.py and its --cv.
K1 = 1.2
# Weak length normalisation: a long message is not much of a worse match.
B = 0.2
# Index terms per message that the length normalisation takes as typical:
# frozen, since weights are never recomputed.
AVG_DOC_LEN = 12.0
# Index-time context: the words of the previous messages of the session, at
# 0.7, 0.49, 0.34 of their own weight. Most answers in a conversation only
# make sense after the question that came before.
CONTEXT_TURNS = 3
CONTEXT_WEIGHT = 0.7
CONTEXT_DECAY = 0.7
# Postings read per query term (the heaviest first): bounds the work of one
# search whatever the user's history size.
MAX_POSTINGS = 300
# Index format 2 keeps a weight in 6 bits, q in 1..63 of MAX_WEIGHT, the
# largest weight ``doc_weights`` gives (bm25's tf part tends to K1 + 1).
MAX_WEIGHT = K1 + 1
WEIGHT_LEVELS = 63
# Query-time neighbour smoothing: a doc gains NEXT_BETA of the score of the
# message after it (the reply that names what the doc was about). The
# previous message is already folded in at index time, hence PREV_ALPHA 0.
PREV_ALPHA = 0.0
NEXT_BETA = 0.4
# A doc whose speaker the query names scores twice as much.
SPEAKER_BOOST = 1.0
# The speaker's name terms are indexed at this weight (a query of only a name
# still finds that speaker's messages).
NAME_WEIGHT = 0.3
# The write date's words ("8 May 2023") are indexed at this weight, so
# "what did she say on 8 May" finds the day's messages.
DATE_WEIGHT = 1.0
# Fused search (an embedder set): the keyword and vector rankings add
# 1 / (RRF_K + rank) each, the vector's times VECTOR_WEIGHT. Tuned on LoCoMo
# with MiniLM (bench/locomo_fusion.py): 0.35 adds a little to the keyword
# ranking; equal weight (1.0) lost 3 points of recall@10.
RRF_K = 60
VECTOR_WEIGHT = 0.35


@dataclass(frozen=True, slots=True)
class Params:
    """The tunable constants in one value, for benches and tests; production
    uses the module defaults."""

    k1: float = K1
    b: float = B
    avg_doc_len: float = AVG_DOC_LEN
    context_turns: int = CONTEXT_TURNS
    context_weight: float = CONTEXT_WEIGHT
    context_decay: float = CONTEXT_DECAY
    #: None: every posting (index format 2 reads whole lists).
    max_postings: int | None = MAX_POSTINGS
    prev_alpha: float = PREV_ALPHA
    next_beta: float = NEXT_BETA
    speaker_boost: float = SPEAKER_BOOST
    name_weight: float = NAME_WEIGHT
    date_weight: float = DATE_WEIGHT


DEFAULT = Params()

_MONTH_TEXT = (
    "January February March April May June July August September October November December"
)
_MONTHS = _MONTH_TEXT.split()


@dataclass(frozen=True, slots=True)
class DocLinks:
    """What the query step reads of a candidate doc."""

    prev: int | None = None
    next: int | None = None
    name: str | None = None


#: A text's ``term -> bm25``, and the one weight they all have when every
#: term occurs once (else None).
_Analysis = tuple[dict[str, float], float | None]


def _analysed(text_terms: Sequence[str], p: Params) -> _Analysis:
    """``term -> bm25`` of one text's terms, in first-occurrence order, and
    the one weight they all have when every term occurs once (else None)."""
    dl = len(text_terms)
    distinct = dict.fromkeys(text_terms)
    if len(distinct) == dl:  # every term once: the common case, one score
        w = bm25.score(1, dl, p.avg_doc_len, k1=p.k1, b=p.b)
        return dict.fromkeys(distinct, w), w
    counts = Counter(text_terms)
    by_count = {n: bm25.score(n, dl, p.avg_doc_len, k1=p.k1, b=p.b) for n in set(counts.values())}
    return {t: by_count[n] for t, n in counts.items()}, None


# ``doc_weights`` called message by message reads each text again as context
# of the next ``context_turns`` messages: the analyses of the last texts it
# weighed are kept (bounded in count and size), with the params they were made
# for, and read back for its context only (a text weighed is analysed anew).
_RECENT_TEXTS = 16
_RECENT_MAX_LEN = 1 << 16
_recent: dict[str, tuple[Params, _Analysis]] = {}


def _remember(text: str, p: Params, analysis: _Analysis) -> None:
    if len(text) <= _RECENT_MAX_LEN:
        if len(_recent) >= _RECENT_TEXTS:
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # threads
                del _recent[next(iter(_recent))]
        _recent[text] = (p, analysis)


def _context_analysis(text: str, p: Params) -> _Analysis:
    hit = _recent.get(text)
    if hit is not None and hit[0] is p:
        return hit[1]
    found = _analysed(terms(text), p)
    _remember(text, p, found)
    return found


class ContextWeigher:
    """``doc_weights`` of a session's messages, fed in order: each text is
    analysed once, and its term weights are kept for the next
    ``context_turns`` messages' context (``doc_weights`` alone analyses a
    message again as context of each of them).

    ``previous``: the texts before the first message fed, oldest first (only
    the last ``context_turns`` are read). ``weigh(content, name, created)``
    returns exactly ``doc_weights(content, name, previous + fed so far,
    params, created=created)``, the same floats in the same order.
    """

    __slots__ = ("_context", "_params")

    def __init__(self, previous: Sequence[str] = (), params: Params = DEFAULT) -> None:
        self._params = params
        turns = max(params.context_turns, 0)
        #: ``_analysed`` of the last ``turns`` texts, oldest first.
        self._context: deque[_Analysis] = deque(maxlen=turns)
        if turns:
            for text in reversed(list(itertools.islice(reversed(previous), turns))):
                self._context.append(_analysed(terms(text), params))

    def weigh(
        self, content: str, name: str | None = None, created: datetime | None = None
    ) -> dict[str, float]:
        """The weights of the session's next message, which becomes context."""
        return self._weigh(_analysed(terms(content), self._params), name, created)

    def _weigh(
        self, own: _Analysis, name: str | None, created: datetime | None
    ) -> dict[str, float]:
        p = self._params
        weights = dict(own[0])
        if name and p.name_weight > 0.0:
            for t in _name_terms(name):
                weights[t] = max(weights.get(t, 0.0), p.name_weight)
        if created is not None and p.date_weight > 0.0:
            for t in _date_terms(created.year, created.month, created.day):
                weights[t] = max(weights.get(t, 0.0), p.date_weight)
        scale = p.context_weight
        get = weights.get
        for context, uniform in reversed(self._context):  # the newest first
            if scale <= 0.0:
                break
            if uniform is not None:  # the same product for every term
                cw = scale * uniform
                for t in context:
                    if cw > get(t, 0.0):
                        weights[t] = cw
            else:
                for t, w in context.items():
                    cw = scale * w
                    if cw > get(t, 0.0):
                        weights[t] = cw
            scale *= p.context_decay
        if self._context.maxlen:
            self._context.append(own)
        return weights


def session_doc_weights(
    texts: Sequence[str],
    names: Sequence[str | None],
    created: Sequence[datetime | None],
    previous: Sequence[str] = (),
    params: Params = DEFAULT,
) -> list[dict[str, float]]:
    """``doc_weights`` of consecutive messages of one session, each analysed
    once: item ``i`` is ``doc_weights(texts[i], names[i], previous +
    texts[:i], params, created=created[i])``."""
    weigher = ContextWeigher(previous, params)
    return [
        weigher.weigh(text, name, when)
        for text, name, when in zip(texts, names, created, strict=True)
    ]


def doc_weights(
    content: str,
    name: str | None = None,
    previous: Sequence[str] = (),
    params: Params = DEFAULT,
    created: datetime | None = None,
) -> dict[str, float]:
    """``term -> weight`` of one message, for its postings (index time).

    ``previous`` holds the texts of the earlier messages of the same session,
    oldest first; only the last ``context_turns`` are read. ``created`` is the
    write time, read in its own timezone (UTC as the indexer passes it).
    A session's messages in a row: ``ContextWeigher`` (each analysed once).
    """
    weigher = ContextWeigher((), params)
    turns = max(params.context_turns, 0)
    if turns:
        for text in reversed(list(itertools.islice(reversed(previous), turns))):
            weigher._context.append(_context_analysis(text, params))
    own = _analysed(terms(content), params)
    _remember(content, params, own)
    return weigher._weigh(own, name, created)


def date_text(created: datetime) -> str:
    """The words a query uses for the day a message was written: ``8 May 2023``."""
    return f"{created.day} {_MONTHS[created.month - 1]} {created.year}"


def quantize_weight(weight: float) -> int:
    """A posting weight as index format 2 keeps it: ``q`` in 1..63. The
    weight is first read back from the text the commit script receives
    (``f"{weight:.6g}"``), so Python and Lua quantize the same number."""
    w = float(f"{weight:.6g}")
    return min(WEIGHT_LEVELS, max(1, math.floor(w / MAX_WEIGHT * WEIGHT_LEVELS + 0.5)))


def dequantize_weight(q: int) -> float:
    """The weight a search reads for level ``q`` (Lua: the same expression)."""
    return q * MAX_WEIGHT / WEIGHT_LEVELS


@functools.lru_cache(maxsize=4096)
def _date_terms(year: int, month: int, day: int) -> tuple[str, ...]:
    return tuple(terms(f"{day} {_MONTHS[month - 1]} {year}"))


def query_terms(query: str) -> dict[str, float]:
    """``term -> query weight`` of a query (each distinct term once)."""
    return dict.fromkeys(terms(query), 1.0)


@functools.lru_cache(maxsize=1024)
def _name_terms(name: str) -> tuple[str, ...]:
    return tuple(terms(name))


def rank(
    query: str,
    postings: Mapping[str, Sequence[tuple[int, float]]],
    n_docs: int,
    links: Mapping[int, DocLinks],
    k: int,
    *,
    accept: Callable[[int], bool] | None = None,
    params: Params = DEFAULT,
) -> list[tuple[int, float]]:
    """The query-time algorithm in Python: the reference the Lua port mirrors.

    ``postings[t]`` is the whole posting list of term ``t`` as
    ``(docid, weight)``, in any order; like ZREVRANGE only the first
    ``max_postings`` by descending weight are read (ties: the member strings
    in descending byte order, as Redis orders them).
    ``links[d]`` gives the prev/next docids and speaker name of doc ``d``.
    Returns up to ``k`` ``(docid, score)``, best first.
    """
    qw = query_terms(query)
    base: dict[int, float] = {}
    for t, q in qw.items():
        plist = postings.get(t, ())
        df = len(plist)
        if df == 0:
            continue
        # df may count docs of cleared sessions that n_docs no longer does
        # (index format 2, until compaction): idf stays >= 0.
        w_t = q * idf(df, max(n_docs, df))
        top = plist
        if params.max_postings is not None and df > params.max_postings:
            top = heapq.nlargest(params.max_postings, plist, key=lambda e: (e[1], str(e[0])))
        for doc, weight in top:
            base[doc] = base.get(doc, 0.0) + w_t * weight

    smooth = params.prev_alpha > 0.0 or params.next_beta > 0.0
    candidates = set(base)
    if smooth:
        for d in base:
            link = links.get(d)
            if link is not None:
                if link.prev is not None:
                    candidates.add(link.prev)
                if link.next is not None:
                    candidates.add(link.next)

    scored: list[tuple[int, float]] = []
    for d in candidates:
        if accept is not None and not accept(d):
            continue
        s = base.get(d, 0.0)
        link = links.get(d)
        if link is not None:
            if smooth:
                if link.prev is not None:
                    s += params.prev_alpha * base.get(link.prev, 0.0)
                if link.next is not None:
                    s += params.next_beta * base.get(link.next, 0.0)
            if params.speaker_boost and link.name and any(t in qw for t in _name_terms(link.name)):
                s *= 1.0 + params.speaker_boost
        if s > 0.0:
            scored.append((d, s))
    scored.sort(key=lambda e: (e[1], e[0]), reverse=True)
    return scored[:k]
