"""Text analysis: tokens, numbers, unicode, stop words and the Porter stemmer."""

from __future__ import annotations

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from redismem.recall.terms import STOP_WORDS, stem, terms

quick = settings(max_examples=examples(300), deadline=None, database=None)

# Porter's own examples (the 1980 paper), plus the two later published fixes.
PORTER = [
    ("caresses", "caress"),
    ("ponies", "poni"),
    ("ties", "ti"),
    ("caress", "caress"),
    ("cats", "cat"),
    ("feed", "feed"),
    ("agreed", "agre"),
    ("plastered", "plaster"),
    ("bled", "bled"),
    ("motoring", "motor"),
    ("sing", "sing"),
    ("conflated", "conflat"),
    ("troubled", "troubl"),
    ("sized", "size"),
    ("hopping", "hop"),
    ("tanned", "tan"),
    ("falling", "fall"),
    ("hissing", "hiss"),
    ("fizzed", "fizz"),
    ("failing", "fail"),
    ("filing", "file"),
    ("happy", "happi"),
    ("sky", "sky"),
    ("relational", "relat"),
    ("conditional", "condit"),
    ("rational", "ration"),
    ("valenci", "valenc"),
    ("digitizer", "digit"),
    ("vietnamization", "vietnam"),
    ("predication", "predic"),
    ("operator", "oper"),
    ("feudalism", "feudal"),
    ("decisiveness", "decis"),
    ("hopefulness", "hope"),
    ("callousness", "callous"),
    ("formaliti", "formal"),
    ("sensitiviti", "sensit"),
    ("sensibiliti", "sensibl"),
    ("triplicate", "triplic"),
    ("formative", "form"),
    ("formalize", "formal"),
    ("electrical", "electr"),
    ("hopeful", "hope"),
    ("goodness", "good"),
    ("revival", "reviv"),
    ("allowance", "allow"),
    ("inference", "infer"),
    ("airliner", "airlin"),
    ("adjustable", "adjust"),
    ("defensible", "defens"),
    ("irritant", "irrit"),
    ("replacement", "replac"),
    ("adjustment", "adjust"),
    ("dependent", "depend"),
    ("adoption", "adopt"),
    ("communism", "commun"),
    ("activate", "activ"),
    ("angulariti", "angular"),
    ("homologous", "homolog"),
    ("effective", "effect"),
    ("bowdlerize", "bowdler"),
    ("probate", "probat"),
    ("rate", "rate"),
    ("cease", "ceas"),
    ("controlling", "control"),
    ("roll", "roll"),
    # the later fixes: bli -> ble, logi -> log
    ("possibly", "possibl"),
    ("psychology", "psycholog"),
    # two letters and less: unchanged
    ("us", "us"),
    ("is", "is"),
]


@pytest.mark.parametrize(("word", "expected"), PORTER)
def test_porter_examples(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_inflections_meet() -> None:
    for family in (
        ("paint", "paints", "painted", "painting"),
        ("adopt", "adopted", "adopting", "adoption", "adopts"),
        ("connect", "connected", "connecting", "connection", "connections"),
        ("camp", "camping", "camped", "camps"),
    ):
        assert len({stem(w) for w in family}) == 1, family


def test_terms_order_and_repeats() -> None:
    assert terms("Painting, painting and more PAINTING!") == ["paint", "paint", "paint"]
    assert terms("dogs chase cats") == ["dog", "chase", "cat"]


def test_stop_words_and_contractions() -> None:
    assert terms("What is the name of the dog that you have?") == ["name", "dog"]
    # contractions and question words never index
    assert terms("I'm sure they've been where we'd go") == ["sure", "go"]
    assert "the" in STOP_WORDS and "what" in STOP_WORDS
    assert all(w == w.casefold() for w in STOP_WORDS)


def test_possessive_and_apostrophes() -> None:
    assert terms("Caroline's dog") == ["carolin", "dog"]
    # typographic apostrophes behave like ASCII ones
    assert terms("Caroline\u2019s dog") == ["carolin", "dog"]
    assert terms("I\u2019m here") == []
    # contractions outside the stop list are function words too
    assert terms("could've, ain't, it'd") == []
    # names keep their apostrophe, closed up, on both sides of a search
    assert terms("O'Brien's rock'n'roll") == ["obrien", "rocknrol"]
    assert terms("o\u2019brien") == ["obrien"]


def test_punctuation_splits() -> None:
    assert terms("self-care/yoga_class") == ["self", "care", "yoga", "class"]
    assert terms("e-mail: a@b.com") == ["e", "mail", "b", "com"]


def test_numbers() -> None:
    assert terms("10,000 steps in 2023") == ["10000", "step", "2023"]
    assert terms("my 18th birthday, the 1st and 22nd") == ["18", "birthdai", "1", "22"]
    assert terms("rated 3.5 out of 5") == ["rate", "3.5", "5"]
    assert terms("the 1990s") == ["1990"]
    # a version-like number stays one token
    assert terms("v1.2.3") == ["v1", "2.3"]


def test_unicode() -> None:
    # other scripts are tokenised and case-folded, not stemmed
    assert terms("Привет Мир") == ["привет", "мир"]
    assert terms("Café crème") == ["café", "crème"]
    assert terms("東京 tokyo") == ["東京", "tokyo"]
    # compatibility forms fold: full-width letters, ligatures, German sharp s
    assert terms("\uff30\uff21\uff29\uff2e\uff34\uff29\uff2e\uff27") == ["paint"]  # full-width
    assert terms("ﬁshing") == ["fish"]
    assert terms("Straße") == terms("STRASSE")
    # decomposed and composed accents are one term
    assert terms("cafe\u0301") == terms("caf\u00e9")


def test_empty_and_noise() -> None:
    assert terms("") == []
    assert terms("  ...!!! -- ") == []
    assert terms("_ __ ___") == []


@quick
@given(st.text(max_size=200))
def test_terms_total_and_stable(text: str) -> None:
    out = terms(text)
    assert all(t and t == t.strip() and t not in STOP_WORDS for t in out)
    # analysing the analysed text again changes nothing but the stems
    assert len(terms(" ".join(out))) <= len(out)


@quick
@given(st.from_regex(r"[a-z]{1,20}", fullmatch=True))
def test_stem_never_grows_much(word: str) -> None:
    s = stem(word)
    assert s and len(s) <= len(word) + 1 and s.isascii()
