"""Ranking: index-time weights, idf, query terms and the reference ``rank``."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redismem.recall import bm25, ranking
from redismem.recall.ranking import DocLinks, Params, doc_weights, idf, query_terms, rank
from redismem.recall.terms import terms

quick = settings(max_examples=200, deadline=None, database=None)

PLAIN = Params(
    context_weight=0.0,
    prev_alpha=0.0,
    next_beta=0.0,
    speaker_boost=0.0,
    name_weight=0.0,
    date_weight=0.0,
)


class Store:
    """An in-memory user index, built the way the indexer builds it."""

    def __init__(self, params: Params = ranking.DEFAULT) -> None:
        self.params = params
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.links: dict[int, DocLinks] = {}
        self._session: list[str] = []
        self._last: int | None = None

    def session(self) -> None:
        self._session, self._last = [], None

    def add(self, text: str, name: str | None = None, created: datetime | None = None) -> int:
        doc = len(self.links) + 1
        weights = doc_weights(text, name, self._session, self.params, created=created)
        for t, w in weights.items():
            self.postings[t].append((doc, w))
        self.links[doc] = DocLinks(prev=self._last, name=name)
        if self._last is not None:
            self.links[self._last] = replace(self.links[self._last], next=doc)
        self._session.append(text)
        self._last = doc
        return doc

    def rank(self, query: str, k: int = 10, **kw: object) -> list[int]:
        params = kw.pop("params", self.params)
        assert isinstance(params, Params)
        got = rank(query, self.postings, len(self.links), self.links, k, params=params)
        return [d for d, _ in got]


FILLER = [
    "we talked about the weather today",
    "the weather was nice and sunny today",
    "today I cooked dinner for the family",
    "the family went for a walk today",
    "work was busy today",
    "I read a book about the weather",
]


# --- BM25 (recall.bm25, shared with the long-term store) ------------------------------


def test_bm25_score_is_the_formula_with_the_callers_parameters() -> None:
    expected = 1.5 * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 10 / 5))
    assert bm25.score(2, 10, 5, k1=1.2, b=0.75, idf=1.5) == pytest.approx(expected)
    # b = 0: the length does not count; b = 1: fully normalised by it.
    assert bm25.score(1, 100, 5, k1=1.2, b=0.0) == pytest.approx(1.0)
    assert bm25.score(1, 10, 5, k1=1.2, b=1.0) < bm25.score(1, 5, 5, k1=1.2, b=1.0)
    # The term frequency saturates towards k1 + 1.
    assert bm25.score(10_000, 5, 5, k1=1.2, b=0.2) == pytest.approx(2.2, rel=1e-3)
    assert idf is bm25.idf


def test_doc_weights_are_bm25_with_recalls_parameters() -> None:
    text = "ramen ramen noodles with friends"
    dl = len(terms(text))
    expected = {
        t: bm25.score(n, dl, ranking.AVG_DOC_LEN, k1=ranking.K1, b=ranking.B)
        for t, n in Counter(terms(text)).items()
    }
    assert doc_weights(text, params=PLAIN) == expected


# --- idf and query terms -------------------------------------------------------------


def test_idf_decreases_with_df_and_stays_positive() -> None:
    n = 1000
    values = [idf(df, n) for df in (1, 2, 10, 100, 500, 999, 1000)]
    assert values == sorted(values, reverse=True)
    assert all(v > 0 for v in values)
    assert idf(1, 1) == pytest.approx(math.log(1 + 0.5 / 1.5))


def test_query_terms_are_analysed_and_distinct() -> None:
    q = query_terms("When did Caroline paint the paintings?")
    assert q == {"carolin": 1.0, "paint": 1.0}
    assert query_terms("the of and") == {}


# --- index-time weights --------------------------------------------------------------


def test_doc_weights_saturate_and_normalise() -> None:
    w = doc_weights("dog dog dog dog cat", params=PLAIN)
    assert w["dog"] > w["cat"] > 0
    assert w["dog"] < ranking.K1 + 1  # tf saturates
    short = doc_weights("dog", params=PLAIN)["dog"]
    long = doc_weights("dog " + " ".join(f"w{i}" for i in range(40)), params=PLAIN)["dog"]
    assert short > long  # longer text, lower weight per occurrence


def test_context_terms_weighted_lower_and_never_override() -> None:
    p = replace(PLAIN, context_weight=0.5, context_turns=2, context_decay=0.5)
    w = doc_weights("sure, tomorrow", previous=["old turn about chess", "recipe for pie"], params=p)
    own = w["tomorrow"]
    assert 0 < w["recip"] < own
    assert 0 < w["chess"] < w["recip"]  # two turns back: decayed again
    # a term in both keeps its own-text weight
    w2 = doc_weights("pie tomorrow", previous=["pie"], params=p)
    assert w2["pie"] == pytest.approx(doc_weights("pie tomorrow", params=p)["pie"])
    # only context_turns previous turns are read
    w3 = doc_weights("ok", previous=["ancient", "b1", "b2"], params=p)
    assert "ancient" not in w3


def test_name_and_date_terms() -> None:
    p = replace(PLAIN, name_weight=0.4, date_weight=0.3)
    when = datetime(2023, 5, 8, 13, 56)
    w = doc_weights("hello there friend", "Caroline", params=p, created=when)
    assert w["carolin"] == pytest.approx(0.4)
    for t in terms("8 May 2023"):
        assert w[t] == pytest.approx(0.3)
    assert ranking.date_text(when) == "8 May 2023"
    # off by default in PLAIN
    assert set(doc_weights("hello", "Caroline", params=PLAIN, created=when)) == {"hello"}


@quick
@given(st.text(max_size=120), st.lists(st.text(max_size=60), max_size=4))
def test_doc_weights_positive_and_from_the_texts(content: str, previous: list[str]) -> None:
    w = doc_weights(content, "Ann", previous)
    allowed = set(terms(content)) | {t for p in previous for t in terms(p)} | {"ann"}
    assert set(w) <= allowed
    assert all(v > 0 and math.isfinite(v) for v in w.values())
    assert set(terms(content)) <= set(w)


# --- the query-time algorithm --------------------------------------------------------


def test_rare_term_outranks_common_terms() -> None:
    s = Store(PLAIN)
    for text in FILLER:
        s.add(text)
    rare = s.add("my saxophone needs new reeds")
    common = s.add("we love the weather here")
    got = s.rank("saxophone weather")
    assert got[0] == rare
    assert common in got


def test_neighbour_smoothing_lifts_the_answer_after_a_question() -> None:
    p = replace(PLAIN, next_beta=0.0, prev_alpha=0.5)
    s = Store(p)
    for text in FILLER:
        s.add(text)
    s.session()
    s.add("what is your favourite board game?", "Ann")
    answer = s.add("definitely chess, since I was five", "Bob")
    s.session()
    s.add("the game on tv was boring", "Ann")
    # the answer shares no term with the query; without smoothing it is absent
    assert answer not in s.rank("favourite board game", params=PLAIN)
    got = s.rank("favourite board game", params=p)
    assert answer in got[:3]


def test_context_at_index_time_finds_the_answer_too() -> None:
    p = replace(PLAIN, context_weight=0.5)
    s = Store(p)
    question = s.add("what is your favourite board game?", "Ann")
    answer = s.add("definitely chess, since I was five", "Bob")
    got = s.rank("favourite board game")
    assert got[:2] == [question, answer]


def test_next_smoothing_lifts_the_turn_before() -> None:
    p = replace(PLAIN, next_beta=0.5)
    s = Store(p)
    setup = s.add("guess what happened at work")
    s.add("I got promoted to senior engineer")
    s.add("lunch was good")
    got = s.rank("promoted senior engineer")
    assert setup in got
    assert setup not in s.rank("promoted senior engineer", params=PLAIN)


def test_speaker_boost_prefers_the_named_speaker() -> None:
    p = replace(PLAIN, speaker_boost=0.5)
    s = Store(p)
    bob = s.add("I love hiking in the mountains", "Bob")
    ann = s.add("I love hiking in the mountains", "Ann")
    assert s.rank("does Ann like hiking?")[0] == ann
    assert s.rank("does Bob like hiking?")[0] == bob
    # no name in the query: ties go to the newer doc
    assert s.rank("hiking mountains") == [ann, bob]


def test_max_postings_bounds_the_work() -> None:
    s = Store(PLAIN)
    docs = [s.add("apple " * (1 + i % 10) + f"x{i}") for i in range(30)]
    p = replace(PLAIN, max_postings=5)
    got = rank("apple", s.postings, len(s.links), s.links, 100, params=p)
    assert len(got) == 5
    full = rank("apple", s.postings, len(s.links), s.links, 100, params=PLAIN)
    assert len(full) == len(docs)
    # the bounded read keeps the heaviest postings: the nine- and ten-apple docs
    assert {d for d, _ in got} <= {d for d in docs if (d - 1) % 10 >= 8}


def test_max_postings_cut_breaks_ties_like_zrevrange() -> None:
    # equal scores: Redis returns members in descending byte order ("9" > "10")
    postings = {"appl": [(d, 1.0) for d in range(1, 13)]}
    links = {d: DocLinks() for d in range(1, 13)}
    p = replace(PLAIN, max_postings=3)
    got = rank("apple", postings, 12, links, 10, params=p)
    assert sorted(d for d, _ in got) == [7, 8, 9]


def test_accept_filter_after_smoothing_and_k() -> None:
    p = replace(PLAIN, prev_alpha=0.5)
    s = Store(p)
    s.add("which city did you visit in spring?", "Ann")
    answer = s.add("Lisbon, it was lovely", "Bob")
    for text in FILLER:
        s.add(text, "Ann")
    got = rank(
        "city visit spring",
        s.postings,
        len(s.links),
        s.links,
        3,
        accept=lambda d: s.links[d].name == "Bob",
        params=p,
    )
    assert [d for d, _ in got] == [answer]
    assert len(s.rank("weather today family", k=2)) == 2


def test_no_match_no_results() -> None:
    s = Store()
    for text in FILLER:
        s.add(text)
    assert s.rank("zebra") == []
    assert s.rank("") == []


def _brute(
    query: str,
    postings: dict[str, list[tuple[int, float]]],
    links: dict[int, DocLinks],
    p: Params,
) -> dict[int, float]:
    """The docstring algorithm written out plainly, without any shortcut."""
    n = len(links)
    qw = query_terms(query)
    base: dict[int, float] = defaultdict(float)
    for t, q in qw.items():
        for d, w in postings.get(t, []):
            base[d] += q * idf(len(postings[t]), n) * w
    out = {}
    for d, link in links.items():
        s = base.get(d, 0.0)
        s += p.prev_alpha * base.get(link.prev, 0.0) if link.prev else 0.0
        s += p.next_beta * base.get(link.next, 0.0) if link.next else 0.0
        if link.name and set(terms(link.name)) & set(qw):
            s *= 1 + p.speaker_boost
        if s > 0:
            out[d] = s
    return out


@quick
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Ann", "Bob"]),
            st.lists(
                st.sampled_from(["apple", "pie", "chess", "game", "Ann", "sunny", "lake", "book"]),
                min_size=1,
                max_size=6,
            ),
        ),
        min_size=1,
        max_size=25,
    ),
    st.lists(
        st.sampled_from(["apple", "chess", "Ann", "Bob", "lake", "book", "zebra"]),
        min_size=1,
        max_size=4,
    ),
)
def test_rank_matches_the_documented_algorithm(
    turns: Sequence[tuple[str, list[str]]], query_words: list[str]
) -> None:
    s = Store()
    for i, (name, words) in enumerate(turns):
        if i % 7 == 0:
            s.session()
        s.add(" ".join(words), name)
    query = " ".join(query_words)
    want = _brute(query, s.postings, s.links, s.params)
    got = dict(rank(query, s.postings, len(s.links), s.links, 1000))
    assert got.keys() == want.keys()
    for d, v in want.items():
        assert got[d] == pytest.approx(v)
