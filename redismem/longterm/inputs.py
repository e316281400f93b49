"""What ``mem.memories`` accepts: argument checks and the mem0-shaped inputs.

* ``user_id`` is a keyword on every ``Knowledge`` method
  (``keyword_user_id``); the older positional form, ``search("u", "tea")``,
  still works for one release, with a ``DeprecationWarning``.
* ``add`` takes a record (a ``Fact``... or its dict), plain text
  (``"I like tea"``) or chat messages (``[{"role": "user", "content": ...}]``,
  or one such dict): ``as_messages`` tells them apart.
* A record pydantic refuses becomes one line of ``InvalidInput`` naming the
  field (``record_error``), never pydantic's many-line report.
* ``add(..., metadata={"app": "chat"})`` (mem0's name) is kept as the tags
  of every record added: strings only, checked as every tags argument is
  (``checks.check_tags``), before anything is added (``with_metadata``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter, ValidationError

from redismem.checks import check_tags
from redismem.errors import InvalidInput
from redismem.longterm.records import (
    MEMORY_KINDS,
    Action,
    AgentTask,
    Document,
    Fact,
    Goal,
    MemoryRecord,
    Relationship,
)
from redismem.models import Message, input_message

__all__ = [
    "as_messages",
    "check_kinds",
    "check_record",
    "check_statuses",
    "check_time",
    "keyword_user_id",
    "notes_or_extracted",
    "record_error",
    "with_metadata",
]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

STATUSES = ("active", "superseded", "deleted")
_RECORD = TypeAdapter[Any](MemoryRecord)
_RECORD_TYPES = (Fact, Document, Relationship, Goal, AgentTask, Action)


def keyword_user_id(method: F) -> F:
    """``method`` with ``user_id`` keyword-only, also called the old way,
    ``user_id`` first and positional: that works, with a ``DeprecationWarning``."""
    name = method.__name__

    @functools.wraps(method)
    async def called(self: object, /, *args: Any, **kwargs: Any) -> Any:
        if args and "user_id" not in kwargs:
            warnings.warn(
                f"memories.{name}(user_id, ...) is deprecated: pass user_id=... as a keyword "
                f"(memories.{name}(..., user_id=...)); the positional form goes away in the "
                "next release",
                DeprecationWarning,
                stacklevel=2,
            )
            kwargs["user_id"] = args[0]
            args = args[1:]
        return await method(self, *args, **kwargs)

    return cast(F, called)


def record_error(exc: ValidationError, what: str = "memory record") -> InvalidInput:
    """One line naming the field(s) pydantic refused in a record."""
    problems = exc.errors()
    first = problems[0]
    kind: str | None = None
    loc = [str(p) for p in first["loc"]]
    if loc and loc[0] in MEMORY_KINDS:  # the union's tag: the record's kind
        kind, loc = loc[0], loc[1:]
    where = f"a {kind} record" if kind else f"a {what}"
    if first["type"] == "union_tag_not_found":
        return InvalidInput(f"{where} needs a 'kind': one of {', '.join(MEMORY_KINDS)}")
    if first["type"] == "union_tag_invalid":
        return InvalidInput(
            f"{where} has an unknown kind {first.get('input', {}).get('kind')!r}; "
            f"kinds are {', '.join(MEMORY_KINDS)}"
        )
    missing = [
        ".".join(str(p) for p in e["loc"][1 if kind else 0 :])
        for e in problems
        if e["type"] == "missing"
    ]
    if first["type"] == "missing":
        names = ", ".join(repr(m) for m in missing)
        field = "field" if len(missing) == 1 else "fields"
        return InvalidInput(f"{where} is missing the {field} {names}")
    field = ".".join(loc) or "value"
    if first["type"] == "extra_forbidden":
        message = f"{where} has no field {field!r}"
    else:
        said = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        message = f"{where}: field {field!r}: {said[:1].lower()}{said[1:]}"
    more = len(problems) - 1
    return InvalidInput(message + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""))


def check_record(record: object) -> MemoryRecord:
    """``record`` (a record model or its dict) validated, as a new object."""
    if isinstance(record, Mapping):
        values = dict(record)
    elif isinstance(record, _RECORD_TYPES):
        # Validated again: a model may have been changed after it was built.
        values = record.model_dump()
    else:
        raise InvalidInput(
            "record must be a Fact, Document, Relationship, Goal, AgentTask or Action, "
            f"its dict, plain text or chat messages, not {type(record).__name__}"
        )
    try:
        return _RECORD.validate_python(values)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise record_error(exc) from None


def with_metadata(
    records: list[MemoryRecord | Mapping[str, Any]], metadata: object
) -> list[MemoryRecord | Mapping[str, Any]]:
    """``records`` with ``metadata`` (``add``'s, a ``Mapping[str, str]`` or
    None) added to their tags, as new records; checked first, all of it, so
    that nothing is added when any of it is wrong. A record's own tag is
    never overridden: the same key with another value is refused."""
    tags = check_tags(metadata, "metadata")
    if not tags:
        return records
    tagged: list[MemoryRecord | Mapping[str, Any]] = []
    for record in records:
        checked = check_record(record)
        for key, value in tags.items():
            held = checked.tags.get(key, value)
            if held != value:
                raise InvalidInput(
                    f"metadata {key!r} is {value!r} but the record's tag {key!r} is {held!r}: "
                    "drop one"
                )
        tagged.append(checked.model_copy(update={"tags": {**checked.tags, **tags}}))
    return tagged


def as_messages(value: object) -> list[Message] | None:
    """The chat messages ``value`` is (plain text: one user message; a dict
    with a ``role``: one message; a list of them), or None for a record."""
    if isinstance(value, str):
        if not value.strip():
            raise InvalidInput("the text to remember must not be empty")
        return [Message(role="user", content=value)]
    if isinstance(value, Mapping) and "role" in value:
        value = [value]
    if not isinstance(value, list | tuple):
        return None
    if not value:
        raise InvalidInput("messages must not be empty")
    out: list[Message] = []
    for i, item in enumerate(value):
        try:
            if isinstance(item, Message):
                out.append(Message.model_validate(item.model_dump()))
            elif isinstance(item, Mapping):
                out.append(input_message(item))
            else:
                raise InvalidInput(
                    f"messages[{i}] must be a dict with a role and content, not "
                    f"{type(item).__name__}"
                )
        except ValidationError as exc:
            problem = exc.errors()[0]
            field = ".".join(str(p) for p in problem["loc"]) or "value"
            raise InvalidInput(
                f"messages[{i}]: field {field!r}: {problem['msg'].lower()}"
            ) from None
    return out


def notes_or_extracted(messages: list[Message], *, infer: bool, text: object) -> list[MemoryRecord]:
    """The records ``add`` makes of chat messages: what the rule extractor
    finds in the user's messages (``infer``); plain text it finds nothing
    in, or every message's text without ``infer``, kept as a note (a
    ``Document``)."""
    from redismem.longterm.extraction.rules import RuleExtractor

    if infer:
        found = RuleExtractor().extract_now(messages)
        if found or not isinstance(text, str):
            return found
    return [
        Document(text=m.content)
        for m in messages
        if m.role in ("user", "assistant") and isinstance(m.content, str) and m.content.strip()
    ]


def check_kinds(kinds: object) -> list[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    if not isinstance(kinds, list | tuple) or not kinds:
        raise InvalidInput(f"kinds must be a kind or a non-empty list of kinds, not {kinds!r}")
    for kind in kinds:
        if kind not in MEMORY_KINDS:
            raise InvalidInput(f"unknown memory kind {kind!r}; kinds are {MEMORY_KINDS}")
    return list(kinds)


def check_statuses(status: object) -> list[str] | None:
    if status is None or status == "any":
        return None
    if isinstance(status, str):
        status = [status]
    if not isinstance(status, list | tuple) or not status:
        raise InvalidInput(f"status must be a status, a list of them or 'any', not {status!r}")
    for one in status:
        if one not in STATUSES:
            raise InvalidInput(f"unknown status {one!r}; statuses are {STATUSES} or 'any'")
    return list(status)


def check_time(value: object, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInput(f"{name} must be a timezone-aware datetime or None")
    return int(value.timestamp() * 1000)
