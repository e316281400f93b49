"""A user message read as statement clauses, for the rule extractor (``rules``).

``clauses(message, now)`` cuts a message into sentences, and a sentence into
clauses where "and/but/, ..." starts a new first-person statement ("my name
is Ana and I live in Lisbon" is two; "I like rock and roll" stays one). It
leaves out questions and hypotheticals ("if I lived in Paris"), takes out
fillers ("oh, well, btw ..."), keeps a polite "can you remind me to ..." as a
statement, and resolves each clause's date phrase both ways (``dates``): a
plan reads it forward, a past event backward.

The helpers below turn what a clause captured into a record's text: one
clean value (``clean_value``), first person as third (``third_person``), a
standalone sentence (``sentence``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from redismem.longterm.extraction.dates import When, find_date
from redismem.models import Message

__all__ = [
    "Clause",
    "clauses",
    "clean_value",
    "sentence",
    "third_person",
    "with_article",
]

_MAX_OBJECT = 80
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
# A new clause starts where "and/but/, ..." is followed by a first-person
# subject, so "I like rock and roll" stays whole but "my name is Ana and I
# live in Lisbon" is two clauses.
_CLAUSES = re.compile(
    r"\s*(?:[,;:]|\s-)\s*(?:(?:and|but|so|because|though|although|while|also)\s+)?"
    r"(?=(?:i|my|we|our)\b)|\s+(?:and|but|so|because|though|although|while)\s+"
    r"(?=(?:i|my)\b)",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(?:(?:oh|ah|well|so|and|but|also|actually|anyway|anyways|btw|by the way|fyi|"
    r"just so you know|for the record|correction|update|ok|okay|yes|yeah|yep|no|nope|hmm|"
    r"um|fun fact|to be honest|honestly|now|oops|sorry|then|plus|hi|hello|hey|"
    r"hi there|hello there|hey there|greetings)\b[\s,:;!.-]*)+",
    re.IGNORECASE,
)
_GREETING = re.compile(r"^\s*(?:hi|hello|hey|greetings)\b", re.IGNORECASE)
_QUESTION = re.compile(
    r"^(?:where|what|who|whom|whose|when|why|how|which|do|does|did|is|are|am|can|could|"
    r"would|should|will|shall|have|has|was|were)\b",
    re.IGNORECASE,
)
_REQUEST = re.compile(r"^(?:please\s+|(?:can|could|would|will)\s+you\s+(?:please\s+)?)", re.I)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|suppose|supposing|imagine|imagining|hypothetically|pretend|pretending|"
    r"assuming|assume|wish|unless|whether|would|could|might|maybe|perhaps|should|i'd|"
    r"what if|let's say)\b",
    re.IGNORECASE,
)
# Where a captured value ends: the rest of the clause is a new thought.
_VALUE_END = re.compile(
    r"\s*(?:,\s*(?:not|but|and|which|who|where|because|since|so|it|it's|that|this|there|"
    r"he|she|they|you|we)\b|\s(?:but|because|although|though|which|where|so that|and now)\b|"
    r"[;:(]|\s-\s).*$",
    re.IGNORECASE,
)
_TRAILING = re.compile(
    r"(?:\s+(?:btw|by the way|too|as well|a lot|so much|very much|though|lol|haha|now|"
    r"anymore|any more|these days|nowadays|currently|right now|actually))+$",
    re.IGNORECASE,
)
_PRONOUNS = {
    "i": "they",
    "i'm": "they're",
    "i've": "they've",
    "i'll": "they'll",
    "me": "them",
    "my": "their",
    "mine": "theirs",
    "myself": "themselves",
    "we": "they",
    "us": "them",
    "our": "their",
    "ours": "theirs",
    "am": "are",
}
_NOT_OBJECTS = {"it", "that", "this", "you", "them", "him", "her", "those", "these", "so"}


@dataclass(frozen=True)
class Clause:
    """One clause of a user message, fillers and its date phrase taken out."""

    text: str
    message: Message
    now: datetime
    greeted: bool
    date_phrase: str
    future_date: When | None
    past_date: When | None


def clauses(message: Message, now: datetime) -> list[Clause]:
    """The statement clauses of a user message: questions and hypotheticals
    left out, a polite "can you remind me to ..." kept as a statement."""
    found: list[Clause] = []
    text = message.content.replace("\u2019", "'")
    for raw in _SENTENCES.split(text):
        said = raw.strip()
        greeted = bool(_GREETING.match(said))
        said = _FILLER.sub("", said)
        request = _REQUEST.match(said)
        if request and re.match(r"remind\s+me\b", said[request.end() :], re.I):
            said = said[request.end() :].rstrip("?")
        if not said or said.endswith("?") or _QUESTION.match(said):
            continue
        if _HYPOTHETICAL.search(said):
            continue
        for index, part in enumerate(_CLAUSES.split(said)):
            part = _FILLER.sub("", part.strip()).rstrip(" .!")
            if not part:
                continue
            rest, future, phrase = find_date(part, now, future=True)
            past = find_date(part, now, future=False)[1]
            found.append(Clause(rest, message, now, greeted and index == 0, phrase, future, past))
    return found


# -- what a clause says, as a record's text ------------------------------------


def clean_value(value: str) -> str | None:
    """A captured value as an object: one thought, no trailing punctuation,
    at most ``_MAX_OBJECT`` characters; None when unusable."""
    value = _VALUE_END.sub("", " ".join(value.split()))
    value = _TRAILING.sub("", value).strip(" .!?,;:'\"")
    if not value or len(value) > _MAX_OBJECT or value.lower() in _NOT_OBJECTS:
        return None
    if re.match(r"(?:not|no longer|never)\b", value, re.I):
        return None
    return value


def third_person(text: str) -> str:
    """First person -> third person, for standalone sentences ("my mom" -> "their mom")."""

    def swap(m: re.Match[str]) -> str:
        return _PRONOUNS.get(m.group(0).lower(), m.group(0))

    return re.sub(
        r"\b(?:i'm|i've|i'll|i|me|my|mine|myself|we|us|our|ours|am)\b", swap, text, flags=re.I
    )


def with_article(noun: str) -> str:
    """The noun after "a" or "an": "a doctor", "an engineer"."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def sentence(text: str, when: When | None = None) -> str:
    """``text`` as one sentence (capitalised, a full stop), ``when`` said after it."""
    text = " ".join(text.split())
    if when is not None:
        text = f"{text} {when.phrase()}"
    return text[0].upper() + text[1:] + "."
