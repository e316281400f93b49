"""Extraction of typed memories from conversations, run by the workers.

An extractor turns a session's new messages into ``MemoryRecord`` drafts
(``id=""``, status "active"), all through one small async protocol,
``Extractor.extract(messages, user_id=...)``. Each draft names the message(s)
it came from (``Provenance.message_ids``, ``origin`` = the extractor's
``name``; the caller fills ``session_id`` and ``agent``) and, as
``created_at``, when the last of them was said (the store makes the value
said last the current one of a single-valued fact). Records about the user
have the subject "user"; dates said relative to a message ("tomorrow", "next
Friday", "last week") are resolved against that message's ``created_at``
into ``event_date`` (and a task's ``due``).

- ``RuleExtractor`` ("rules", ``rules``): English rules over user messages,
  read clause by clause (``clauses``), dates resolved by ``dates``.
- ``LLMExtractor`` ("llm", ``llm``): one chat-completions call per batch.
- ``job``: the worker pass that runs an extractor and stores what it found.

``extractor_from_env`` picks one from ``REDISMEM_EXTRACTOR`` (off by default:
extraction stores lasting data about users, which a deployment turns on);
the names are registered in ``redismem.plugins``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from redismem import plugins
from redismem.longterm.extraction.llm import LLMExtractor
from redismem.longterm.extraction.rules import RuleExtractor
from redismem.longterm.records import MemoryRecord
from redismem.models import Message

__all__ = [
    "Extractor",
    "LLMExtractor",
    "RuleExtractor",
    "extractor_from_env",
]


@runtime_checkable
class Extractor(Protocol):
    """Turns a session's new messages (in order) into memory drafts."""

    @property
    def name(self) -> str:
        """Recorded as ``Provenance.origin``: "rules" or "llm"."""
        ...

    async def extract(self, messages: Sequence[Message], *, user_id: str) -> list[MemoryRecord]: ...


def extractor_from_env(env: Mapping[str, str] | None = None) -> Extractor | None:
    """``REDISMEM_EXTRACTOR`` = ``off`` (default: None), ``rules`` or ``llm``
    (with the ``REDISMEM_LLM_*`` endpoint), read from ``env`` (default: the
    process environment) when called. Off by default: extraction stores new,
    lasting data about users, which a deployment turns on knowingly."""
    extractor: Extractor | None = plugins.EXTRACTORS.from_env(env)  # names in one place
    return extractor
