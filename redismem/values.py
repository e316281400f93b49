"""JSON values that round-trip: what a free-form value may hold.

Message metadata, dict tool-call arguments, long-term records and the
LangGraph store's values are free-form. One rule decides what they may hold:
a value is accepted only if it comes back exactly as it went in, through the
stored format (msgpack, see ``redismem.core.codec``) and through JSON
(``to_chat()``, snapshots, LLM requests). That is plain JSON data:

* ``None``, ``bool``, ``str`` (encodable as UTF-8: no lone surrogates);
* ``int`` within msgpack's range, ``-2**63 .. 2**64 - 1``;
* ``float`` that is finite. ``nan`` and ``±inf`` survive msgpack, but they
  are not JSON (``json.dumps`` writes the non-standard ``NaN``; pydantic's
  JSON mode writes ``null``) and ``nan != nan``, so they are rejected;
* ``list`` and ``dict`` with ``str`` keys, holding such values, nested at
  most ``MAX_DEPTH`` containers deep (the value itself counting as one), so a
  hostile or self-referencing structure is rejected instead of exhausting the
  stack.

Rejected, because they would come back as something else: ``tuple`` (a
list), ``bytes`` (not JSON; encode them, e.g. base64, into a ``str``),
non-``str`` dict keys, ``set``, ``datetime`` and other objects. Types are
matched exactly: a subclass of ``dict``, ``str``, ``int`` ... (``OrderedDict``,
``StrEnum``, ``IntEnum``) would come back as the base type, so it is rejected
too; convert it first.

``check_json_value`` raises ``ValueError``, which pydantic turns into a
``ValidationError`` in the models' validators; a check of an argument
outside a model raises it as ``InvalidInput`` (argument checks:
``redismem.checks``).
"""

from __future__ import annotations

import math

__all__ = ["INT_MAX", "INT_MIN", "MAX_DEPTH", "check_json_value"]

#: Most containers (dicts and lists) nested in one value, itself included.
MAX_DEPTH = 32
#: The integer range msgpack stores (int64 and uint64).
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


def check_json_value(value: object, where: str = "value") -> None:
    """Raise ``ValueError`` naming the path of the first part of ``value``
    that would not round-trip (see the module docstring); return None if all do.

    Lists and dicts may nest ``MAX_DEPTH`` (32) deep, ``value`` itself
    counting as one: message metadata may hold 31 more levels inside its
    dict; the 33rd container is refused ("nests more than 32 lists and
    dicts"), as the README's limits section says.

    ``where`` names ``value`` in the message (e.g. ``"metadata"``).
    """
    _check(value, where, 0)


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where} is not valid UTF-8 text ({exc.reason})") from None


def _check(value: object, where: str, depth: int) -> None:
    # Exact types: a subclass would come back as its base type.
    if value is None or type(value) is bool:
        return
    if type(value) is str:
        _check_text(value, where)
    elif type(value) is int:
        if not INT_MIN <= value <= INT_MAX:
            raise ValueError(f"{where} is an int outside [-2**63, 2**64 - 1]")
    elif type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}: only finite floats are JSON")
    elif type(value) is list:
        _check_depth(where, depth)
        for i, item in enumerate(value):
            _check(item, f"{where}[{i}]", depth + 1)
    elif type(value) is dict:
        _check_depth(where, depth)
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(
                    f"{where} has a key of type {type(key).__name__} ({key!r:.40}): "
                    "keys must be str"
                )
            _check_text(key, f"key {key!r:.40} of {where}")
            _check(item, f"{where}[{key!r:.40}]", depth + 1)
    else:
        raise ValueError(
            f"{where} is a {type(value).__name__}{_HINTS.get(type(value), '')}: only None, "
            "bool, int, float, str, list and dict with str keys are stored as given"
        )


def _check_depth(where: str, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise ValueError(f"{where} nests more than {MAX_DEPTH} lists and dicts")


_HINTS: dict[type, str] = {
    tuple: " (use a list)",
    bytes: " (encode it into a str, e.g. base64)",
    bytearray: " (encode it into a str, e.g. base64)",
}
