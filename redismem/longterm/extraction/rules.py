"""The rule extractor: deterministic English rules over what the user says.

``RuleExtractor`` ("rules") reads **user** messages only, clause by clause
(``clauses``), and tries a readable table of regular expressions (``_RULES``)
on each clause. Precision over recall: questions, hypotheticals ("if I lived
in Paris") and negated statements yield nothing; confidence 0.6-0.7. Dates
said relative to a message ("tomorrow", "next Friday") are resolved against
its ``created_at`` (``dates``) into ``event_date`` (and a task's ``due``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from redismem.longterm.extraction.clauses import (
    Clause,
    clauses,
    clean_value,
    sentence,
    third_person,
    with_article,
)
from redismem.longterm.extraction.dates import When
from redismem.longterm.records import (
    AgentTask,
    Fact,
    Goal,
    MemoryRecord,
    Provenance,
    Relationship,
    normalize_predicate,
    normalize_text,
)
from redismem.models import Message

__all__ = ["RuleExtractor"]

# -- the words the rules know ------------------------------------------------------------

# fmt: off
_RELATIONS = (
    "best friend", "wife", "husband", "partner", "spouse", "boyfriend", "girlfriend", "fiance",
    "fiancee", "mother", "mom", "mum", "father", "dad", "parent", "son", "daughter", "child",
    "kid", "baby", "brother", "sister", "sibling", "twin", "cousin", "aunt", "uncle",
    "grandmother", "grandfather", "grandma", "grandpa", "granddaughter", "grandson", "niece",
    "nephew", "friend", "boss", "manager", "colleague", "coworker", "co-worker", "roommate",
    "flatmate", "neighbor", "neighbour", "mentor", "teacher", "doctor", "dentist", "therapist",
    "dog", "cat", "pet",
)
# fmt: on
_RELATION = "|".join(_RELATIONS)  # "best friend" first: it wins over "friend"
_NAME = r"(?-i:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})"
_NOT_NAMES = {"Sorry", "Back", "Here", "Fine", "Good", "Ok", "Okay", "Just", "Not", "So", "The"}
#: "my <key> is <value>": keys that name the same thing as a known predicate.
_KEY_ALIASES = {
    "e-mail": "email",
    "email address": "email",
    "e-mail address": "email",
    "mail": "email",
    "phone number": "phone",
    "mobile": "phone",
    "mobile number": "phone",
    "cell": "phone",
    "number": "phone",
    "date of birth": "birthday",
    "birth date": "birthday",
    "job": "job_title",
    "job title": "job_title",
    "title": "job_title",
    "occupation": "job_title",
    "profession": "job_title",
    "role": "job_title",
    "time zone": "timezone",
    "native language": "preferred_language",
    "first name": "name",
    "full name": "name",
    "nickname": "nickname",
    "hometown": "hometown",
    "home town": "hometown",
}
#: "my <key> is ...": not a fact about the user ("my question is ...").
# fmt: off
_NOT_KEYS = {
    "point", "question", "problem", "issue", "guess", "bad", "pleasure", "turn", "concern",
    "answer", "idea", "hope", "request", "fault", "mistake", "understanding", "impression",
    "opinion", "take", "thought", "reason", "code", "message", "prompt",
}
# fmt: on
# fmt: off
_LANGUAGES = {
    "english", "spanish", "portuguese", "french", "german", "italian", "dutch", "chinese",
    "mandarin", "cantonese", "japanese", "korean", "russian", "arabic", "hindi", "polish",
    "swedish", "turkish", "greek",
}
# fmt: on
_TRAVEL = re.compile(
    r"\b(?:trains?|planes?|flying|fly|flights?|cars?|driving|drive|bus|buses|aisle|window)\b", re.I
)


# -- what a match builds -----------------------------------------------------------------


def _fact(
    predicate: str,
    obj: str | None,
    text: str,
    when: When | None = None,
    single_valued: bool | None = None,
) -> Fact | None:
    if obj is None:
        return None
    return Fact(
        text=sentence(text, when),
        subject="user",
        predicate=predicate,
        object=obj,
        event_date=when.at if when else None,
        single_valued=single_valued,
    )


_Built = Fact | Relationship | Goal | AgentTask | None
_Builder = Callable[[re.Match[str], Clause], "_Built | list[_Built]"]


def _name(m: re.Match[str], c: Clause) -> _Built:
    name = clean_value(m.group("v"))
    if name is None or len(name.split()) > 4 or not re.fullmatch(r"[\w' -]+", name):
        return None
    if name.islower():
        name = name.title()
    return _fact("name", name, f"User's name is {name}")


def _greeting_name(m: re.Match[str], c: Clause) -> _Built:
    # "I'm X" is a name only right after a greeting ("Hi, I'm Ana"), the
    # whole clause, capitalized: "I'm Tired" or "I'm German" stay unread otherwise.
    name = m.group("v")
    if not c.greeted or name.split()[0] in _NOT_NAMES:
        return None
    return _fact("name", name, f"User's name is {name}")


def _age(m: re.Match[str], c: Clause) -> _Built:
    age = int(m.group("v"))
    return _fact("age", str(age), f"User is {age} years old") if 0 < age < 130 else None


def _lives_in(m: re.Match[str], c: Clause) -> _Built:
    place = clean_value(m.group("v"))
    return _fact("lives_in", place, f"User lives in {place}")


def _moved(m: re.Match[str], c: Clause) -> _Built:
    place = clean_value(m.group("v"))
    return _fact("lives_in", place, f"User moved to {place}", c.past_date)


def _lived_in(m: re.Match[str], c: Clause) -> _Built:
    place = clean_value(m.group("v"))
    return _fact("lived_in", place, f"User no longer lives in {place}", single_valued=False)


def _from(m: re.Match[str], c: Clause) -> _Built:
    place = clean_value(m.group("v"))
    return _fact("hometown", place, f"User is from {place}", single_valued=True)


def _works_at(m: re.Match[str], c: Clause) -> _Built:
    return _employer(m.group("v"))


def _employer(raw: str) -> _Built:
    org = clean_value(raw)
    if org is None or org.lower() in {"home", "night", "nights", "weekends", "the moment"}:
        return None
    return _fact("works_at", org, f"User works at {org}")


def _worked_at(m: re.Match[str], c: Clause) -> _Built:
    org = clean_value(m.group("v"))
    return _fact("worked_at", org, f"User no longer works at {org}", single_valued=False)


def _job_title(m: re.Match[str], c: Clause) -> _Built | list[_Built]:
    title = clean_value(m.group("v"))
    if title is None:
        return None
    found: list[_Built] = [_fact("job_title", title, f"User works as {with_article(title)}")]
    org = m.groupdict().get("org")
    if org:
        found.append(_employer(org))
    return found


def _diet(m: re.Match[str], c: Clause) -> _Built:
    diet = m.group("v").lower()
    return _fact("diet", diet, f"User is {diet}")


def _allergy(m: re.Match[str], c: Clause) -> _Built:
    what = clean_value(m.group("v"))
    return _fact("allergic_to", what, f"User is allergic to {what}", single_valued=False)


def _preference(predicate: str, verb: str) -> _Builder:
    def build(m: re.Match[str], c: Clause) -> _Built:
        what = clean_value(m.group("v"))
        if what is None:
            return None
        text = f"User {verb} {third_person(what)}"
        return _fact(predicate, what, text, single_valued=False)

    return build


def _prefers(m: re.Match[str], c: Clause) -> _Built:
    what = clean_value(m.group("v"))
    other = clean_value(m.group("other") or "") if m.group("other") else None
    if what is None:
        return None
    text = f"User prefers {third_person(what)}" + (f" over {third_person(other)}" if other else "")
    # A choice between ways of travelling, or a language, is one value at a
    # time (a known single-valued predicate); other preferences accumulate.
    if _TRAVEL.search(what) or (other and _TRAVEL.search(other)):
        return _fact("preferred_travel", what, text)
    language = what.lower().removeprefix("to speak ").removeprefix("answers in ")
    if language in _LANGUAGES:
        return _fact("preferred_language", language.title(), text)
    return _fact("prefers", what, text, single_valued=False)


def _my_key_is(m: re.Match[str], c: Clause) -> _Built:
    """ "my <key> is <value>", the broadest rule: see ``RuleExtractor``."""
    key = " ".join(m.group("key").lower().split())
    raw = m.group("v")
    if not raw.strip() and c.date_phrase:  # "my birthday is May 5": the value was the date
        raw = re.sub(r"^(?:on|in|at)\s+", "", c.date_phrase, flags=re.I)
    value = clean_value(raw)
    if value is None or key in _NOT_KEYS:
        return None
    possessor, _, attribute = key.partition("'s ")
    if attribute:  # "my wife's name is Ana", "my dog's birthday is May 5"
        if possessor not in _RELATIONS:
            return None
        if attribute == "name":
            return _relationship(possessor, value)
        subject = f"user's {possessor}"
        return Fact(
            text=sentence(f"User's {possessor}'s {attribute} is {value}", c.future_date),
            subject=subject,
            predicate=normalize_predicate(_KEY_ALIASES.get(attribute, attribute)),
            object=value,
            event_date=c.future_date.at if c.future_date else None,
        )
    if key in _RELATIONS:  # "my sister is Maria"; "my wife is a doctor" is not read
        return _relationship(key, value) if re.fullmatch(_NAME, value) else None
    if key in ("goal", "dream", "plan", "aim") and value.lower().startswith("to "):
        return Goal(
            text=sentence(f"User's {key} is {third_person(value)}", c.future_date),
            event_date=c.future_date.at if c.future_date else None,
        )
    predicate = _KEY_ALIASES.get(key) or normalize_predicate(
        re.sub(r"^favou?rite\b", "favorite", key)
    )
    if predicate == "email" and "@" not in value:
        return None
    verb = "are" if m.group("verb").lower() == "are" else "is"
    when = c.future_date
    if when is not None and (predicate in ("birthday", "anniversary") or not m.group("v")):
        # A yearly date reads as said ("May 5"); another one gets its full date.
        said = value if predicate in ("birthday", "anniversary") else when.phrase()
        return Fact(
            text=sentence(f"User's {key} {verb} {said}"),
            subject="user",
            predicate=predicate,
            object=value,
            event_date=when.at,
        )
    return _fact(predicate, value, f"User's {key} {verb} {third_person(value)}")


def _relationship(relation: str, target: str) -> Relationship:
    relation = normalize_predicate(relation)
    return Relationship(
        text=sentence(f"User's {relation.replace('_', ' ')} is {target}"),
        entity="user",
        target=target,
        relation=relation,
    )


def _named_relative(m: re.Match[str], c: Clause) -> _Built:
    target = m.group("v")
    return None if target.split()[0] in _NOT_NAMES else _relationship(m.group("rel"), target)


def _married(m: re.Match[str], c: Clause) -> _Built:
    target = m.group("v")
    return Relationship(
        text=sentence(f"User is married to {target}"),
        entity="user",
        target=target,
        relation="spouse",
    )


def _remind(m: re.Match[str], c: Clause) -> _Built:
    what = clean_value(m.group("v"))
    if what is None:
        return None
    when = c.future_date
    return AgentTask(
        text=sentence(f"Remind the user to {third_person(what)}", when),
        due=when.at if when else None,
        event_date=when.at if when else None,
    )


def _dated_plan(verb: str) -> _Builder:
    """A plan with a date is a task due then ("I'm going to Paris tomorrow")."""

    def build(m: re.Match[str], c: Clause) -> _Built:
        what, when = clean_value(m.group("v")), c.future_date
        if what is None or when is None:
            return None
        return AgentTask(
            text=sentence(f"User {verb} {third_person(what)}", when),
            due=when.at,
            event_date=when.at,
        )

    return build


_GOAL_VERBS = {
    "goal": "User's goal is to",
    "dream": "User's dream is to",
    "plan": "User plans to",
    "aim": "User's aim is to",
    "intend": "User intends to",
    "hope": "User hopes to",
    "want": "User wants to",
    "planning": "User is planning to",
    "hoping": "User is hoping to",
    "trying": "User is trying to",
}
#: "I want to know ..." is a request in the conversation, not a goal.
_NOT_GOALS = re.compile(
    r"(?:know|ask|see|check|understand|find out|make sure|say|tell|talk|learn more|clarify|"
    r"confirm|be clear|be honest|mention|add|point out|thank)\b",
    re.IGNORECASE,
)


def _goal(m: re.Match[str], c: Clause) -> _Built:
    """An intention, dated or not, is a goal ("I plan to learn Spanish")."""
    what, when = clean_value(m.group("v")), c.future_date
    if what is None or _NOT_GOALS.match(what):
        return None
    verb = _GOAL_VERBS[(m.group("key") or m.group("verb") or m.group("verb2")).lower()]
    return Goal(
        text=sentence(f"{verb} {third_person(what)}", when),
        event_date=when.at if when else None,
    )


def _visited(m: re.Match[str], c: Clause) -> _Built:
    place = clean_value(m.group("v"))
    if place is None or c.past_date is None:
        return None
    text = f"User {m.group('verb').lower()} {third_person(place)}"
    return _fact("visited", place, text, c.past_date, single_valued=False)


# -- the rules ---------------------------------------------------------------------------

_I_AM = r"(?:i\s+am|i'm|im)"
_ADVERB = r"(?:(?:now|currently|still|also|actually|really|just|recently)\s+)?"


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    build: _Builder
    confidence: float = 0.7
    #: Matched anywhere in the clause, in addition to the first anchored rule
    #: that matches ("I'm seeing my sister Maria" is also a relationship).
    anywhere: bool = False


def _rule(pattern: str, build: _Builder, confidence: float = 0.7, anywhere: bool = False) -> _Rule:
    anchor = "" if anywhere else "^"
    return _Rule(re.compile(anchor + pattern, re.IGNORECASE), build, confidence, anywhere)


#: The rules, tried in order on each clause of a user message: the first
#: anchored rule (matching from the clause's start) that builds something
#: wins; every ``anywhere`` rule adds what it finds.
_RULES: tuple[_Rule, ...] = (
    # who the user is
    _rule(r"my\s+name(?:\s+is|'s)\s+(?P<v>.+)", _name),
    _rule(rf"(?:{_I_AM}\s+called|call\s+me|people\s+call\s+me)\s+(?P<v>.+)", _name),
    _rule(rf"{_I_AM}\s+(?P<v>{_NAME})$", _greeting_name),
    _rule(rf"{_I_AM}\s+(?P<v>\d{{1,3}})\s*(?:years?\s+old|years?\s+of\s+age|yo|y/o)\b", _age),
    _rule(r"my\s+age\s+is\s+(?P<v>\d{1,3})\b", _age),
    _rule(r"i\s+(?:no\s+longer|don't|do\s+not)\s+live\s+in\s+(?P<v>.+)", _lived_in),
    _rule(r"i\s+used\s+to\s+live\s+in\s+(?P<v>.+)", _lived_in),
    _rule(rf"i\s+{_ADVERB}(?:live|reside)\s+in\s+(?P<v>.+)", _lives_in),
    _rule(rf"{_I_AM}\s+{_ADVERB}(?:living|based|located)\s+in\s+(?P<v>.+)", _lives_in),
    _rule(rf"i(?:'ve|\s+have)?\s+{_ADVERB}(?:moved|relocated)\s+to\s+(?P<v>.+)", _moved),
    _rule(rf"{_I_AM}\s+(?:originally\s+)?from\s+(?P<v>.+)", _from),
    _rule(r"i\s+(?:no\s+longer|don't|do\s+not)\s+work\s+(?:at|for)\s+(?P<v>.+)", _worked_at),
    _rule(r"i\s+(?:used\s+to\s+work|quit\s+my\s+job)\s+(?:at|for)\s+(?P<v>.+)", _worked_at),
    _rule(
        rf"i\s+{_ADVERB}work\s+as\s+(?:an?\s+)?(?P<v>.+?)(?:\s+(?:at|for)\s+(?P<org>.+))?$",
        _job_title,
    ),
    _rule(rf"i\s+{_ADVERB}work\s+(?:at|for)\s+(?P<v>.+)", _works_at),
    _rule(rf"{_I_AM}\s+{_ADVERB}employed\s+(?:at|by)\s+(?P<v>.+)", _works_at),
    _rule(rf"{_I_AM}\s+an?\s+(?P<v>.+?)\s+by\s+(?:profession|trade)\b", _job_title),
    _rule(rf"{_I_AM}\s+(?:an?\s+)?(?P<v>vegetarian|vegan|pescatarian|keto)\b", _diet),
    _rule(rf"{_I_AM}\s+{_ADVERB}allergic\s+to\s+(?P<v>.+)", _allergy, 0.7),
    _rule(rf"{_I_AM}\s+married\s+to\s+(?P<v>{_NAME})", _married),
    _rule(rf"(?P<v>{_NAME})\s+is\s+my\s+(?P<rel>{_RELATION})\b", _named_relative, 0.6),
    _rule(
        rf"i\s+have\s+an?\s+(?P<rel>{_RELATION})\s+(?:named|called)\s+(?P<v>{_NAME})",
        _named_relative,
        0.6,
    ),
    # plans and reminders
    _rule(r"remind\s+me\s+to\s+(?P<v>.+)", _remind),
    _rule(
        rf"(?:my\s+(?P<key>goal|dream|plan|aim)\s+is\s+to|i\s+{_ADVERB}(?P<verb>plan|intend|"
        rf"hope|want)\s+to|{_I_AM}\s+(?P<verb2>planning|hoping|trying)\s+to)\s+(?P<v>.+)",
        _goal,
        0.6,
    ),
    _rule(rf"{_I_AM}\s+going\s+to\s+(?P<v>.+)", _dated_plan("is going to"), 0.6),
    _rule(r"(?:i\s+will|i'll)\s+(?P<v>.+)", _dated_plan("will"), 0.6),
    _rule(r"i\s+(?:need|have)\s+to\s+(?P<v>.+)", _dated_plan("needs to"), 0.6),
    _rule(r"i\s+have\s+(?P<v>an?\s+.+)", _dated_plan("has"), 0.6),
    _rule(r"i\s+(?P<verb>went\s+to|visited|travell?ed\s+to|flew\s+to)\s+(?P<v>.+)", _visited, 0.6),
    # preferences
    _rule(
        rf"i\s+{_ADVERB}(?:much\s+|strongly\s+)?prefer\s+(?P<v>.+?)"
        r"(?:\s+(?:over|to|rather\s+than|instead\s+of)\s+(?P<other>.+))?$",
        _prefers,
        0.6,
    ),
    _rule(
        r"i\s+(?:really\s+|absolutely\s+|just\s+|totally\s+)?(?:hate|dislike|detest|can't\s+stand|"
        r"cannot\s+stand|don't\s+like|do\s+not\s+like|don't\s+enjoy)\s+(?P<v>.+)",
        _preference("dislikes", "dislikes"),
        0.6,
    ),
    _rule(
        rf"(?:i\s+(?:really\s+|absolutely\s+|just\s+|totally\s+)?(?:like|love|enjoy|adore)|"
        rf"{_I_AM}\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of)\s+(?P<v>.+)",
        _preference("likes", "likes"),
        0.6,
    ),
    # "my X is Y", last: the more specific rules above win
    _rule(
        # The key in lower case: "my sister Maria is ..." names someone, it is no key.
        r"my\s+(?P<key>(?-i:[a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,2}))\s+(?P<verb>is|are)\s*"
        r"(?P<v>.*)",
        _my_key_is,
        0.6,
    ),
    # anywhere in a clause: "... my sister Maria ..."
    _rule(
        rf"\bmy\s+(?P<rel>{_RELATION})(?:,)?\s+(?P<v>{_NAME})(?:'s)?\b",
        _named_relative,
        0.6,
        anywhere=True,
    ),
)


# -- the extractor -----------------------------------------------------------------------


@dataclass(frozen=True)
class RuleExtractor:
    """Deterministic extraction from what the user says about themselves.

    Reads **user** messages only (never assistant or tool text): identity
    (name, age, home, employer, job), "my X is Y" (``favorite X`` ->
    ``favorite_x``; "my wife's name is Ana" and "my sister Maria" ->
    ``Relationship(user, Ana, wife)``; "my dog's birthday is ..." -> a fact
    about "user's dog"), likes, dislikes and preferences (several values at
    once, except travel and language preferences), plans with a date (a
    ``AgentTask`` due then), intentions (``Goal``) and "remind me to" (``AgentTask``).
    "I no longer live in X" is the multi-valued ``lived_in``; "actually, I
    live in Y" is the new single-valued ``lives_in`` (the store supersedes
    the old one). ``confidence`` is 0.7 for direct statements, 0.6 for the
    looser readings, below the LLM extractor's default 0.9.
    """

    name: str = "rules"

    async def extract(self, messages: Sequence[Message], *, user_id: str) -> list[MemoryRecord]:
        return self.extract_now(messages)

    def extract_now(self, messages: Sequence[Message]) -> list[MemoryRecord]:
        """``extract``, synchronously (it does no I/O)."""
        records: dict[tuple[str, str], MemoryRecord] = {}
        for message in messages:
            if message.role != "user" or not message.content:
                continue
            now = message.created_at or datetime.now(UTC)
            for clause in clauses(message, now):
                for record, confidence in _apply(clause):
                    source = Provenance(
                        message_ids=[message.id] if message.id else [], origin=self.name
                    )
                    key = (record.kind, normalize_text(record.text))
                    seen = records.pop(key, None)
                    if seen is not None:  # said again: one record, every message cited
                        ids = [*seen.sources[0].message_ids, *source.message_ids]
                        source = Provenance(message_ids=list(dict.fromkeys(ids)), origin=self.name)
                    # created_at: when it was said (the store orders the
                    # values of a single-valued fact by it).
                    records[key] = record.model_copy(
                        update={
                            "confidence": confidence,
                            "sources": [source],
                            "created_at": message.created_at,
                        }
                    )
        return list(records.values())


def _apply(clause: Clause) -> list[tuple[MemoryRecord, float]]:
    found: list[tuple[MemoryRecord, float]] = []
    anchored_done = False
    for rule in _RULES:
        if anchored_done and not rule.anywhere:
            continue
        match = rule.pattern.search(clause.text)
        if match is None:
            continue
        built = rule.build(match, clause)
        items = [item for item in (built if isinstance(built, list) else [built]) if item]
        found.extend((item, rule.confidence) for item in items)
        anchored_done = anchored_done or (bool(items) and not rule.anywhere)
    return found
