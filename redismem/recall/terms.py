"""Text analysis for keyword search: the one place text becomes index terms.

Recall (``Memory.search``) and the long-term store (``mem.store.search``)
both index and query through ``terms``, so a query finds what indexing
stored. Changing anything here changes every stored weight: bump
``ANALYSIS_VERSION`` so indexes built with the old rules can be rebuilt.

The pipeline, in order:

1. Unicode NFKC, case folding, typographic apostrophes made ASCII.
2. Tokens: runs of letters/digits (any script), inner apostrophes kept
   (``don't``), hyphens and other punctuation split words (``self-care`` ->
   ``self``, ``care``). Numbers keep their inner ``.``/``,`` (``3.5``,
   ``10,000`` -> ``10000``); ordinals lose their suffix (``18th`` -> ``18``).
3. Stop words dropped (on the surface form, before stemming). Then
   apostrophes: a possessive ``'s`` goes (``caroline's`` -> ``caroline``),
   other contractions (``could've``, ``ain't``) are function words and go,
   and inner apostrophes of names close up (``o'brien`` -> ``obrien``).
4. Porter stemming (M. F. Porter, 1980, with the two later published
   fixes ``abli``->``able`` read as ``bli``->``ble`` and ``logi``->``log``)
   for tokens of pure ASCII letters; other tokens (digits, other scripts)
   are kept as they are.

Steps 2-4 depend on a token alone, so ``terms`` caches the terms of each
chunk of text it meets (bounded): a conversation's vocabulary is small.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import chain

__all__ = ["ANALYSIS_VERSION", "STOP_WORDS", "stem", "terms"]

ANALYSIS_VERSION = 2

# A number with inner separators and a letter suffix (3.5, 10,000, 18th), or a
# letter/digit run, optionally joined by apostrophes (don't).
_TOKEN_RE = re.compile(r"\d+(?:[.,]\d+)*[^\W_]*|[^\W_]+(?:'[^\W_]+)*")
_ORDINAL_RE = re.compile(r"^(\d+)(?:st|nd|rd|th|s)$")
_CLITICS = frozenset(["t", "ve", "ll", "re", "d", "m"])
_ASCII_WORD_RE = re.compile(r"^[a-z]+$")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


def _ascii_byte(c: int) -> int:
    ch = chr(c)
    if ch == "`":
        return ord("'")
    if ch.isalnum() or ch in "'.,":
        return ord(ch.lower())
    return ord(" ")


# ASCII text in one pass (a bytes table: much faster than a str one): lower
# case, the backtick an apostrophe, and a blank for every character that
# cannot be part of a token (all but letters, digits and the ``'.,`` tokens
# hold inside).
_ASCII_TABLE = bytes(map(_ascii_byte, range(128))) + bytes(range(128, 256))

# The classic English function words (SMART/Snowball-sized core), plus the
# question words and auxiliaries queries are made of. Content words that
# merely happen to be frequent ("like", "good") are left to idf.
_STOP_TEXT = """
    a about above after again against all am an and any are aren't as at be because
    been before being below between both but by can can't cannot could couldn't did
    didn't do does doesn't doing don't down during each few for from further had
    hadn't has hasn't have haven't having he he'd he'll he's her here here's hers
    herself him himself his how how's i i'd i'll i'm i've if in into is isn't it
    it's its itself let's me more most mustn't my myself no nor not of off on once
    only or other ought our ours ourselves out over own same shan't she she'd she'll
    she's should shouldn't so some such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've
    were weren't what what's when when's where where's which while who who's whom
    why why's will with won't would wouldn't you you'd you'll you're you've your
    yours yourself yourselves also just s t ve ll re d m yes oh hey hi ok okay
    really
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


def terms(text: str) -> list[str]:
    """Index terms of ``text``, in order, repeats kept (term frequency counts)."""
    if text.isascii():
        # NFKC and case folding of ASCII are ``lower``; one translate lowers,
        # makes the backtick an apostrophe and blanks every character no
        # token holds, so the chunks between blanks are cache keys.
        chunks = text.encode().translate(_ASCII_TABLE).decode().split()
    else:
        norm = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold()
        chunks = _TOKEN_RE.findall(norm)
    return list(chain.from_iterable(map(_CHUNK_TERMS.__getitem__, chunks)))


def _chunk_terms(chunk: str) -> tuple[str, ...]:
    """The terms of a normalised piece of text (a token, or a run of ASCII
    letters, digits and ``'.,`` between blanks)."""
    out = []
    for tok in _TOKEN_RE.findall(chunk):
        term = _term(tok)
        if term:
            out.append(term)
    return tuple(out)


def _term(tok: str) -> str:
    """The term of one normalised token, ``""`` when it has none."""
    if tok in STOP_WORDS:
        return ""
    if "'" in tok:
        head, _, tail = tok.rpartition("'")
        if tail in _CLITICS:
            return ""  # could've, ain't, it'd: function words
        tok = (head if tail == "s" else tok).replace("'", "")
        if tok in STOP_WORDS:
            return ""
    if tok[0].isdigit():
        tok = _number(tok)
    elif _ASCII_WORD_RE.match(tok):
        tok = stem(tok)
    if tok and tok not in STOP_WORDS:  # a stem may be one too: "ase" -> "as"
        return tok
    return ""


class _ChunkCache(dict[str, tuple[str, ...]]):
    """``chunk -> its terms``, computed on first sight: a conversation's
    vocabulary is small, so most chunks are a dict hit. Bounded: emptied when
    full, and long chunks (ids, blobs) are not kept."""

    __slots__ = ()

    def __missing__(self, chunk: str) -> tuple[str, ...]:
        found = _chunk_terms(chunk)
        if len(chunk) <= _CACHE_CHUNK_LEN:
            if len(self) >= _CACHE_SIZE:
                self.clear()
            self[chunk] = found
        return found


_CACHE_SIZE = 1 << 16
_CACHE_CHUNK_LEN = 48
_CHUNK_TERMS = _ChunkCache()


def _number(tok: str) -> str:
    """``10,000`` -> ``10000``; ``18th`` -> ``18``; ``3.5`` stays."""
    if "," in tok:
        tok = tok.replace(",", "")
    m = _ORDINAL_RE.match(tok)
    return m.group(1) if m else tok


# --- Porter stemmer ---------------------------------------------------------

_VOWELS = frozenset("aeiou")


def _is_cons(w: str, i: int) -> bool:
    c = w[i]
    if c in _VOWELS:
        return False
    if c == "y":
        return i == 0 or not _is_cons(w, i - 1)
    return True


def _measure(w: str) -> int:
    """m in [C](VC){m}[V]."""
    m = 0
    prev_vowel = False
    for i in range(len(w)):
        cons = _is_cons(w, i)
        if cons and prev_vowel:
            m += 1
        prev_vowel = not cons
    return m


def _has_vowel(w: str) -> bool:
    return any(not _is_cons(w, i) for i in range(len(w)))


def _double_cons(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _is_cons(w, len(w) - 1)


def _cvc(w: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (*o)."""
    n = len(w)
    return (
        n >= 3
        and _is_cons(w, n - 3)
        and not _is_cons(w, n - 2)
        and _is_cons(w, n - 1)
        and w[-1] not in "wxy"
    )


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("logi", "log"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = [
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
]


def _replace(w: str, rules: tuple[tuple[str, str], ...], min_m: int) -> str:
    """First rule whose suffix matches decides; applied when m(stem) > min_m."""
    for suffix, repl in rules:
        if w.endswith(suffix):
            base = w[: -len(suffix)]
            return base + repl if _measure(base) > min_m else w
    return w


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Porter stem of a lower-case ASCII word (words of 1-2 letters unchanged)."""
    w = word
    if len(w) <= 2:
        return w
    # Step 1a
    if w.endswith("sses") or w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    # Step 1b
    if w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    else:
        for suffix in ("ed", "ing"):
            if w.endswith(suffix) and _has_vowel(w[: -len(suffix)]):
                w = w[: -len(suffix)]
                if w.endswith(("at", "bl", "iz")):
                    w += "e"
                elif _double_cons(w) and w[-1] not in "lsz":
                    w = w[:-1]
                elif _measure(w) == 1 and _cvc(w):
                    w += "e"
                break
    # Step 1c
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    # Steps 2 and 3
    w = _replace(w, _STEP2, 0)
    w = _replace(w, _STEP3, 0)
    # Step 4: the longest matching suffix decides.
    for suffix in sorted((s for s in _STEP4 if w.endswith(s)), key=len, reverse=True)[:1]:
        base = w[: -len(suffix)]
        if _measure(base) > 1 and (suffix != "ion" or base.endswith(("s", "t"))):
            w = base
    # Step 5a
    if w.endswith("e"):
        base = w[:-1]
        m = _measure(base)
        if m > 1 or (m == 1 and not _cvc(base)):
            w = base
    # Step 5b
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w
