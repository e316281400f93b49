"""Typed long-term memories: the records ``mem.memories`` keeps.

Every record has a ``kind`` and the fields all kinds share (``MemoryBase``);
each kind adds its own. ``Memory`` is the discriminated union of them, and
``MemoryDraft`` is what an extractor proposes (``redismem.longterm.extraction``):
a record before the store gives it an id, times and a status.

Records are data remembered from conversations; callers put them into
prompts fenced as data (``redismem.context.quoting``), never as instructions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from redismem.recall.terms import terms
from redismem.values import check_json_value

__all__ = [
    "MEMORY_KINDS",
    "SINGLE_VALUED_PREDICATES",
    "Action",
    "Document",
    "DocumentChunk",
    "Fact",
    "Goal",
    "MemoryBase",
    "MemoryChange",
    "MemoryKind",
    "MemoryRecord",
    "MemoryStatus",
    "Provenance",
    "Relationship",
    "AgentTask",
]

MemoryKind = Literal["fact", "document", "relationship", "goal", "task", "action"]
MEMORY_KINDS: tuple[MemoryKind, ...] = (
    "fact",
    "document",
    "relationship",
    "goal",
    "task",
    "action",
)
MemoryStatus = Literal["active", "superseded", "deleted"]

#: Predicates a subject holds one value of at a time: a new object for the
#: same subject supersedes the old fact (``Fact.single_valued`` overrides).
SINGLE_VALUED_PREDICATES = frozenset(
    {
        "name",
        "age",
        "birthday",
        "lives_in",
        "works_at",
        "job_title",
        "role",
        "email",
        "phone",
        "timezone",
        "nationality",
        "marital_status",
        "partner",
        "favorite_color",
        "favorite_food",
        "preferred_language",
        "preferred_travel",
        "diet",
    }
)

#: The words a question about a predicate is asked with, beyond the
#: predicate's own words ("where do I live" finds ``User moved to Porto.``,
#: predicate ``lives_in``): indexed with every fact (and relationship) of
#: the predicate, so a record is found by what it answers as well as by its
#: text. Keys are normalized predicates; the words go through the same
#: analysis as queries (stemmed, stop words dropped), so one form of a word
#: is enough. Question words ("where", "who") are stop words: they find
#: nothing and are not listed.
PREDICATE_CUES: dict[str, tuple[str, ...]] = {
    "name": ("called", "named", "call"),
    "nickname": ("called", "named", "name"),
    "age": ("old", "years", "born"),
    "birthday": ("born", "birth", "date"),
    "lives_in": ("live", "home", "reside", "address", "city", "based", "located", "moved"),
    "lived_in": ("live", "home", "used", "past", "previous", "former", "moved"),
    "hometown": ("from", "born", "grew", "origin", "home"),
    "works_at": ("work", "job", "employer", "company", "employed", "office"),
    "worked_at": ("work", "job", "employer", "company", "previous", "former"),
    "job_title": ("job", "work", "occupation", "profession", "role", "position"),
    "role": ("job", "work", "position", "title"),
    "email": ("mail", "address", "contact", "reach"),
    "phone": ("number", "mobile", "cell", "call", "contact", "reach"),
    "timezone": ("time", "zone", "clock", "local"),
    "nationality": ("citizen", "country", "passport"),
    "marital_status": ("married", "single", "spouse"),
    "partner": ("wife", "husband", "spouse", "girlfriend", "boyfriend", "married"),
    "diet": ("eat", "food", "vegetarian", "vegan"),
    "allergic_to": ("allergy", "allergies", "allergic", "avoid", "food"),
    "likes": ("like", "love", "enjoy", "favorite", "fan"),
    "dislikes": ("dislike", "hate", "avoid"),
    "prefers": ("prefer", "preference", "like", "favorite"),
    "preferred_language": ("language", "speak", "prefer"),
    "preferred_travel": ("travel", "trip", "prefer"),
    "visited": ("visit", "trip", "travel", "went", "been"),
}

_TEXT_MAX = 16_000


class Provenance(BaseModel):
    """Where a memory came from: one source of a record (a record added again
    from elsewhere keeps every source)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    agent: str | None = None
    #: Who produced it: "api" (an ``add`` call), "rules" or "llm" (an extractor).
    origin: str = "api"
    #: The write id of the operation that added this source (re-sends apply once).
    write_id: str | None = None
    at: datetime | None = None


class MemoryBase(BaseModel):
    """The fields every kind of memory has."""

    model_config = ConfigDict(extra="forbid")

    #: Set by the store: ``""`` on a record not stored yet.
    id: str = ""
    text: str
    tags: dict[str, str] = Field(default_factory=dict)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    #: When what the memory tells happened or happens (not when it was learned).
    event_date: datetime | None = None
    status: MemoryStatus = "active"
    sources: list[Provenance] = Field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: The record this one replaced, and the one that replaced it.
    supersedes: str | None = None
    superseded_by: str | None = None
    superseded_at: datetime | None = None

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be blank")
        if len(value) > _TEXT_MAX:
            raise ValueError(f"text is longer than {_TEXT_MAX} characters")
        return value


class Fact(MemoryBase):
    """``subject predicate object``: "user lives_in Lisbon"."""

    kind: Literal["fact"] = "fact"
    subject: str
    predicate: str
    object: str
    #: None: single-valued when the predicate is in ``SINGLE_VALUED_PREDICATES``.
    single_valued: bool | None = None

    def is_single_valued(self) -> bool:
        if self.single_valued is not None:
            return self.single_valued
        return normalize_predicate(self.predicate) in SINGLE_VALUED_PREDICATES


class DocumentChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    text: str


class Document(MemoryBase):
    """A document, split into chunks that are searchable one by one."""

    kind: Literal["document"] = "document"
    title: str = ""
    #: Where it came from (a URL, a path, a tool's name).
    source_ref: str = ""
    summary: str = ""
    #: Filled by the store on ``add`` (from ``text``) when left empty.
    chunks: list[DocumentChunk] = Field(default_factory=list)


class Relationship(MemoryBase):
    """The user's (or an entity's) relation to another entity."""

    kind: Literal["relationship"] = "relationship"
    entity: str
    target: str
    relation: str
    strength: float = Field(default=0.5, ge=0.0, le=1.0)
    interactions: int = Field(default=1, ge=0)


class Goal(MemoryBase):
    kind: Literal["goal"] = "goal"
    achieved: bool = False


class AgentTask(MemoryBase):
    kind: Literal["task"] = "task"
    task_status: Literal["open", "in_progress", "done", "cancelled"] = "open"
    due: datetime | None = None


class Action(MemoryBase):
    """Something an agent did, and what came of it."""

    kind: Literal["action"] = "action"
    name: str
    result: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json_value(value, "arguments")
        return value


MemoryRecord = Annotated[
    Fact | Document | Relationship | Goal | AgentTask | Action, Field(discriminator="kind")
]


class MemoryChange(BaseModel):
    """One state in a record's ``history``: the record as it was after a change."""

    model_config = ConfigDict(extra="forbid")

    version: int
    at: datetime
    #: "added", "source_added", "superseded", "updated", "deleted", "restored"
    change: str
    record: MemoryRecord | None
    #: Why (e.g. the id of the record that superseded it, or the LLM's reason).
    reason: str = ""


def normalize_predicate(predicate: str) -> str:
    """``"Lives in"`` -> ``"lives_in"``: the form predicates are compared in."""
    return "_".join(predicate.lower().split()).replace("-", "_")


def normalize_text(text: str) -> str:
    """The form exact duplicates are found by: lower case, words only."""
    words = "".join(ch if ch.isalnum() else " " for ch in text.casefold()).split()
    return " ".join(words)


def predicate_words(predicate: str) -> list[str]:
    """The words a record of ``predicate`` is found by besides its text:
    the predicate's own (``favorite_color`` -> favorite, color) and its
    entry in ``PREDICATE_CUES``, in that order; one word per index term
    ("lives" and "live" are one), none that is only a stop word ("in")."""
    key = normalize_predicate(predicate)
    words: list[str] = []
    seen: set[str] = set()
    for word in [*key.split("_"), *PREDICATE_CUES.get(key, ())]:
        found = terms(word)
        if found and not seen.issuperset(found):
            seen.update(found)
            words.append(word)
    return words


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
