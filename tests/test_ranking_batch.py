"""The fast analysis path gives exactly what the original one gave.

``ranking.ContextWeigher`` / ``session_doc_weights`` analyse each message
once and reuse its term weights as context; ``terms`` caches the terms of
each chunk of text. Both are checked against private copies of the original
implementations (``_reference_terms``, ``_reference_doc_weights``, as of
834c88b): the same terms in the same order, the same floats in the same
dict order.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redismem.recall import bm25, ranking
from redismem.recall import terms as analysis
from redismem.recall.ranking import ContextWeigher, Params, doc_weights, session_doc_weights
from redismem.recall.terms import STOP_WORDS, stem, terms

quick = settings(max_examples=300, deadline=None, database=None)

# -- the original implementations --------------------------------------------


def _reference_terms(text: str) -> list[str]:
    out: list[str] = []
    norm = unicodedata.normalize("NFKC", text).translate(analysis._APOSTROPHES).casefold()
    for tok in analysis._TOKEN_RE.findall(norm):
        if tok in STOP_WORDS:
            continue
        if "'" in tok:
            head, _, tail = tok.rpartition("'")
            if tail in analysis._CLITICS:
                continue
            tok = (head if tail == "s" else tok).replace("'", "")
            if tok in STOP_WORDS:
                continue
        if tok[0].isdigit():
            if "," in tok:
                tok = tok.replace(",", "")
            m = analysis._ORDINAL_RE.match(tok)
            tok = m.group(1) if m else tok
        elif analysis._ASCII_WORD_RE.match(tok):
            tok = stem(tok)
        if tok and tok not in STOP_WORDS:
            out.append(tok)
    return out


def _reference_tf(text_terms: Sequence[str], p: Params) -> dict[str, float]:
    dl = len(text_terms)
    return {
        t: bm25.score(n, dl, p.avg_doc_len, k1=p.k1, b=p.b) for t, n in Counter(text_terms).items()
    }


def _reference_doc_weights(
    content: str,
    name: str | None = None,
    previous: Sequence[str] = (),
    params: Params = ranking.DEFAULT,
    created: datetime | None = None,
) -> dict[str, float]:
    weights = _reference_tf(_reference_terms(content), params)
    if name and params.name_weight > 0.0:
        for t in _reference_terms(name):
            weights[t] = max(weights.get(t, 0.0), params.name_weight)
    if created is not None and params.date_weight > 0.0:
        for t in _reference_terms(ranking.date_text(created)):
            weights[t] = max(weights.get(t, 0.0), params.date_weight)
    scale = params.context_weight
    for prev_text in list(reversed(previous))[: params.context_turns]:
        if scale <= 0.0:
            break
        for t, w in _reference_tf(_reference_terms(prev_text), params).items():
            cw = scale * w
            if cw > weights.get(t, 0.0):
                weights[t] = cw
        scale *= params.context_decay
    return weights


# -- strategies ------------------------------------------------------------------

_WORDS = [
    "flight",
    "flights",
    "Flying",
    "hotel",
    "the",
    "and",
    "don't",
    "Caroline's",
    "o'brien",
    "could've",
    "3.5",
    "10,000",
    "18th",
    "2023",
    "May",
    "e.g.",
    "self-care",
    "café",
    "naïve",
    "Straße",
    "ﬁle",
    "\uff11\uff12",
    "it\u2019s",
    "`quoted`",
    "snake_case",
    "...",
    "ASE",
    "generalization",
    "happiness",
    "x" * 60,
]
_SEPARATORS = [" ", "  ", ", ", ". ", "\n", "\t", "!", "?", " - ", "(", ")", "'", '"', ""]

words_text = st.lists(
    st.tuples(st.sampled_from(_WORDS), st.sampled_from(_SEPARATORS)), max_size=30
).map(lambda parts: "".join(w + s for w, s in parts))
any_text = st.one_of(
    words_text, st.text(max_size=60), st.text(alphabet="aB9'`.,_- \n\u2019", max_size=30)
)

params_st = st.builds(
    Params,
    k1=st.floats(0.1, 3.0),
    b=st.floats(0.0, 1.0),
    avg_doc_len=st.floats(1.0, 30.0),
    context_turns=st.integers(0, 5),
    context_weight=st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    context_decay=st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    name_weight=st.one_of(st.just(0.0), st.floats(0.0, 2.0)),
    date_weight=st.one_of(st.just(0.0), st.floats(0.0, 2.0)),
) | st.just(ranking.DEFAULT)

dates = st.none() | st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)
).flatmap(
    lambda d: st.sampled_from(
        [d, d.replace(tzinfo=UTC), d.replace(tzinfo=timezone(timedelta(hours=-9)))]
    )
)
names = st.none() | st.sampled_from(["", "Ann", "Caroline", "Melanie Smith", "Bot", "the"])
messages = st.lists(st.tuples(any_text, names, dates), max_size=12)


def _same(got: dict[str, float], want: dict[str, float]) -> None:
    assert list(got.items()) == list(want.items())


# -- terms -----------------------------------------------------------------------


@quick
@given(any_text)
def test_terms_match_the_reference(text: str) -> None:
    assert terms(text) == _reference_terms(text)
    assert terms(text) == _reference_terms(text)  # again, from the cache


def test_terms_match_the_reference_on_samples() -> None:
    samples = [
        "I don't think Caroline's o'brien could've flown 10,000 miles on the 18th.",
        "It\u2019s `quoted`, e.g. 3.5 or 1,2,3 and snake_case_words!",
        "ÉCOLE ﬁle Straße İstanbul 12 naïve",
        "RUN-running runs ran; GENERALIZATION happiness",
        "\x00\x1f\x7f abc\x0bdef\x1cghi",
        "",
        "   ",
        "a" * 200 + " " + "b" * 49 + " " + "c" * 48,
    ]
    for text in samples:
        assert terms(text) == _reference_terms(text), text


def test_the_chunk_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = analysis._ChunkCache()
    monkeypatch.setattr(analysis, "_CHUNK_TERMS", cache)
    monkeypatch.setattr(analysis, "_CACHE_SIZE", 10)
    text = " ".join(f"word{i}" for i in range(35)) + " " + "y" * 49
    assert terms(text) == _reference_terms(text)
    assert 0 < len(cache) <= 10
    assert "y" * 49 not in cache  # long chunks are not kept
    assert terms("z" * 48) == ["z" * 48] and "z" * 48 in cache


# -- weights ----------------------------------------------------------------------


@quick
@given(messages, st.lists(any_text, max_size=6), params_st)
def test_session_weights_equal_doc_weights_per_message(
    session: list[tuple[str, str | None, datetime | None]],
    previous: list[str],
    params: Params,
) -> None:
    texts = [t for t, _, _ in session]
    got = session_doc_weights(
        texts, [n for _, n, _ in session], [c for _, _, c in session], previous, params
    )
    assert len(got) == len(session)
    history = list(previous)
    for weights, (text, name, created) in zip(got, session, strict=True):
        want = _reference_doc_weights(text, name, history, params, created)
        _same(weights, want)
        _same(doc_weights(text, name, history, params, created), want)
        history.append(text)


def test_each_text_is_analysed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()

    def counting(text: str) -> list[str]:
        calls[text] += 1
        return terms(text)

    monkeypatch.setattr(ranking, "terms", counting)
    texts = [f"message number {i} about topic{i % 4}" for i in range(20)]
    previous = [f"earlier {i}" for i in range(10)]
    dated = datetime(2023, 5, 8, tzinfo=UTC)
    session_doc_weights(texts, ["Ann"] * 20, [dated] * 20, previous)
    assert all(calls[t] == 1 for t in texts)
    # only the last CONTEXT_TURNS earlier texts are read at all
    assert sorted(t for t in calls if t.startswith("earlier")) == [
        f"earlier {i}" for i in range(10 - ranking.CONTEXT_TURNS, 10)
    ]


def test_the_weigher_keeps_the_last_turns() -> None:
    weigher = ContextWeigher(["chess opening", "pie recipe"])
    first = weigher.weigh("sure", "Ann")
    assert {"chess", "open", "pie", "recip", "sure", "ann"} <= set(first)
    for filler in ("one", "two", "three"):
        weigher.weigh(filler)
    assert "chess" not in weigher.weigh("done")
    with pytest.raises(ValueError):
        session_doc_weights(["a", "b"], [None], [None, None])


def test_doc_weights_message_by_message_analyses_each_text_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As ``index_pass`` calls it: the previous texts are the ones just weighed."""
    calls: Counter[str] = Counter()

    def counting(text: str) -> list[str]:
        calls[text] += 1
        return terms(text)

    monkeypatch.setattr(ranking, "terms", counting)
    monkeypatch.setattr(ranking, "_recent", {})
    texts = [f"note {i} on subject{i % 5}" for i in range(30)]
    previous: list[str] = []
    for text in texts:
        want = _reference_doc_weights(text, "Ann", previous)
        _same(doc_weights(text, "Ann", previous), want)
        previous.append(text)
    assert all(calls[t] == 1 for t in texts)


def test_recent_analyses_are_per_params() -> None:
    a, b = Params(k1=0.9), Params(k1=2.0, context_weight=0.5)
    for params in (a, b, a, ranking.DEFAULT, b):
        for previous in ([], ["x y z pie"], ["pie pie", "crust"]):
            text = "pie pie and crust"
            _same(
                doc_weights(text, None, previous, params),
                _reference_doc_weights(text, None, previous, params),
            )
    huge = "word " * 20_000  # longer than _RECENT_MAX_LEN: not kept
    _same(doc_weights(huge), _reference_doc_weights(huge))
    assert huge not in ranking._recent


def test_a_text_weighed_is_analysed_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only context reads the recent analyses: weighing a text computes its
    bm25 scores even when the same text was weighed just before."""
    doc_weights("ramen noodles")
    calls: list[float] = []
    one_score = bm25.score

    def spy(*args: float, k1: float, b: float, idf: float = 1.0) -> float:
        calls.append(k1)
        return one_score(*args, k1=k1, b=b, idf=idf)

    monkeypatch.setattr(bm25, "score", spy)
    doc_weights("ramen noodles")
    assert calls == [ranking.K1]
