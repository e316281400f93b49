"""Argument checks: every public entry point checks its arguments with these.

A checker returns the value it was given (typed), or raises ``InvalidInput``
(also a ``ValueError``) naming the argument; nothing has been sent to Redis
then. ``bool`` is not accepted where an ``int`` is asked for, nor a ``float``
(``2.0`` included). An int is at most ``MAX_INT`` (``2**53 - 1``): a count
or a limit goes to a Lua script, which holds numbers as doubles, exact only
up to there (a larger one reached Redis as ``9.2e+18`` and came back as an
error reply). A number (a score, seconds) is finite: ``nan`` compares false
with everything and ``inf`` is no bound a script can hold.

A check used by more than one module lives here, and a module's own
arguments are checked with these rather than by hand. Two rules live apart:
what a free-form JSON value may hold (``redismem.values``, applied by the
models and, for arguments, by ``check_plain_json``), and what a message is
(``redismem.models``, whose validators apply it).
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard, TypeVar

from redismem.errors import InvalidInput
from redismem.models import Message
from redismem.values import check_json_value

__all__ = [
    "MAX_INT",
    "MAX_TAGS",
    "check_bool",
    "check_choice",
    "check_count",
    "check_fraction",
    "check_instance",
    "check_int",
    "check_items",
    "check_list_of",
    "check_message_list",
    "check_optional_bool",
    "check_optional_callable",
    "check_optional_int",
    "check_optional_number",
    "check_optional_str",
    "check_plain_json",
    "check_seconds",
    "check_tags",
    "check_text",
    "check_time_ms",
    "check_ttl",
    "check_write_id",
    "new_write_id",
    "shown",
]

T = TypeVar("T")

#: Most tag pairs one call may carry.
MAX_TAGS = 64
#: Largest int argument accepted: the integers a Lua script holds exactly.
MAX_INT = 2**53 - 1
_WRITE_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")


# -- scalars ------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def shown(value: object) -> str:
    """``repr(value)``, or a description of an int too long to print (Python
    refuses to format one of more than 4,300 digits)."""
    if _is_int(value) and abs(value).bit_length() > 64:
        return f"an int of {abs(value).bit_length()} bits"
    return repr(value)


def _int_error(name: str, value: object, minimum: int, maximum: int, none: str) -> InvalidInput:
    """The range is named when it has a lower top than ``MAX_INT`` or
    ``value`` is past the top."""
    if maximum < MAX_INT or (_is_int(value) and value > maximum):
        return InvalidInput(
            f"{name} must be an int in [{minimum}, {maximum}]{none}, got {shown(value)}"
        )
    return InvalidInput(f"{name} must be an int >= {minimum}{none}, got {shown(value)}")


def check_int(name: str, value: object, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """An ``int`` in ``[minimum, maximum]`` (by default at most ``MAX_INT``)."""
    if not _is_int(value) or not minimum <= value <= maximum:
        raise _int_error(name, value, minimum, maximum, "")
    return value


def check_optional_int(
    name: str, value: object, *, minimum: int = 0, maximum: int = MAX_INT
) -> int | None:
    """An ``int`` in ``[minimum, maximum]``, or None (no limit)."""
    if value is None:
        return None
    if not _is_int(value) or not minimum <= value <= maximum:
        raise _int_error(name, value, minimum, maximum, " or None")
    return value


def check_count(name: str, value: object) -> int:
    """An ``int`` in ``[0, MAX_INT]``, or None given as -1 (no limit: the
    scripts' convention)."""
    count = check_optional_int(name, value)
    return -1 if count is None else count


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_optional_number(name: str, value: object) -> float | None:
    """A finite number (``int`` or ``float``, not ``bool``, ``nan`` or
    ``±inf``) as a ``float``, or None."""
    if value is None:
        return None
    if not _is_number(value) or not _finite(value):
        raise InvalidInput(f"{name} must be a finite number or None, got {shown(value)}")
    return float(value)


def check_seconds(name: str, value: object) -> float:
    """A finite number of seconds ``>= 0`` as a ``float``."""
    if not _is_number(value) or not _finite(value) or value < 0:
        raise InvalidInput(f"{name} must be a finite number of seconds >= 0, got {shown(value)}")
    return float(value)


def check_ttl(
    name: str, value: object, *, maximum: float, unit: str = "seconds", none: str = ""
) -> float | None:
    """A time to live: a number of ``unit`` in ``(0, maximum]`` as a
    ``float``, or None (``none`` says what None means, in the message).

    Compared before anything converts it, so ``nan``, ``±inf`` and an int
    beyond a float's range are refused as out of range, not raised as
    ``OverflowError``."""
    if value is None:
        return None
    if not _is_number(value) or not 0 < value <= maximum:
        raise InvalidInput(
            f"{name} must be a number of {unit} in (0, {maximum:.0f}] or None{none}, "
            f"got {shown(value)}"
        )
    return float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


def check_fraction(name: str, value: object) -> float:
    """A number in ``[0, 1]``."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise InvalidInput(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be a bool, got {value!r}")
    return value


def check_optional_bool(name: str, value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise InvalidInput(f"{name} must be a bool or None, got {value!r}")
    return value


def check_text(name: str, value: object) -> str:
    """A non-empty ``str``."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name} must be a non-empty str, got {value!r}")
    return value


def check_optional_str(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{name} must be a str or None, not {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: Sequence[T]) -> T:
    """One of ``choices``."""
    for choice in choices:
        if value == choice:
            return choice
    raise InvalidInput(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_optional_callable(name: str, value: object) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidInput(f"{name} must be callable or None, not {type(value).__name__}")
    return value


def check_instance(name: str, value: object, cls: type, *, optional: bool = False) -> None:
    """``value`` is a ``cls`` (a class or a runtime-checkable protocol), or
    None when ``optional``."""
    if (value is None and optional) or isinstance(value, cls):
        return
    none = " or None" if optional else ""
    raise InvalidInput(f"{name} must be a {cls.__name__}{none}, not {type(value).__name__}")


# -- collections ----------------------------------------------------------------


def check_items(name: str, values: Iterable[object], cls: type) -> None:
    """Every item of ``values`` is a ``cls``."""
    for position, value in enumerate(values):
        if not isinstance(value, cls):
            raise InvalidInput(
                f"{name}[{position}] is a {type(value).__name__}, not a {cls.__name__}"
            )


def check_list_of(name: str, value: object, cls: type, *, what: str) -> None:
    """A sequence (not a single ``cls``) of ``cls`` items; ``what`` names them."""
    if isinstance(value, cls) or not isinstance(value, Sequence):
        raise InvalidInput(f"{name} must be a list of {what}")
    check_items(name, value, cls)


def check_message_list(messages: object) -> None:
    """An iterable of messages (``Message`` objects or dicts, checked one by
    one later), not a single message."""
    if type(messages) is list:  # the usual case, without the ABC checks
        return
    if isinstance(messages, Message | Mapping) or not isinstance(messages, Iterable):
        raise InvalidInput("messages must be a list of Message objects or dicts")


def check_time_ms(value: object, what: str) -> int | None:
    """A timezone-aware ``datetime`` (or None) as Unix milliseconds, the
    store's time unit (a finer part is dropped)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime or None, not {type(value).__name__}")
    if value.tzinfo is None:
        raise InvalidInput(f"{what} must be timezone-aware (e.g. datetime.now(UTC))")
    return (value - _EPOCH) // _MILLISECOND


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def check_plain_json(name: str, value: object) -> None:
    """``value`` holds plain JSON data that round-trips (the stored-value
    rule: ``redismem.values``)."""
    try:
        check_json_value(value, name)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def check_tags(tags: object, name: str = "tags") -> dict[str, str]:
    """At most ``MAX_TAGS`` pairs of ``str`` (keys non-empty); None is no tags.
    ``name``: the argument's, for the message (``metadata`` is tags too)."""
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise InvalidInput(f"{name} must be a dict[str, str], not {type(tags).__name__}")
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} {name} per call, got {len(tags)}")
    one = "tag" if name == "tags" else name
    for key, value in tags.items():
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"{one} keys must be non-empty str, got {key!r}")
        if not isinstance(value, str):
            raise InvalidInput(f"{one} values must be str, got {value!r} for {key!r}")
    return dict(tags)


# -- ids and objects ----------------------------------------------------------------


class _WriteIds:
    """Fresh write ids: 32 hex digits, a random 64-bit prefix per process
    (drawn again in a forked child) and a counter, so ids never repeat within
    a process and two processes share none but by a 2**-64 chance. Cheaper
    than 128 random bits per id, which costs a system call."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self.prefix = os.urandom(8).hex()
        self.counter = itertools.count(int.from_bytes(os.urandom(4)))

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter) & _COUNTER_MASK:016x}"


_COUNTER_MASK = 2**64 - 1
_write_ids = _WriteIds()


def new_write_id() -> str:
    """A fresh write id, unique (see ``_WriteIds``): 32 hex digits."""
    return _write_ids.next()


def check_write_id(value: object) -> str:
    """A write id: 1-128 printable ASCII characters without spaces; a fresh
    one (``new_write_id``) for None."""
    if value is None:
        return new_write_id()
    if not isinstance(value, str) or not _WRITE_ID_RE.fullmatch(value):
        raise InvalidInput(
            f"write_id must be 1-128 printable ASCII characters without spaces, got {value!r}"
        )
    return value
