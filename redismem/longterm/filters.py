"""The long-term store's filter language: which items a search keeps.

A filter is a dict ``{path: condition}``; an item matches when every
condition holds on its value. ``path`` is dotted (``"a.b"``, list positions
as numbers: ``"tags.0"``). A condition is a plain JSON value (equality) or a
dict of operators::

    {"stars": 5}                          equal
    {"stars": {"$gte": 4, "$lt": 6}}      every operator holds
    {"lang": {"$in": ["en", "pt"]}}       equal to one of the list

Operators: ``$eq $ne $gt $gte $lt $lte $in``. Equality is JSON's: numbers by
value (``1 == 1.0``), ``bool`` never equal to a number, lists and objects
element by element. Order (``$gt`` ...) holds between two numbers or two
strings only. A missing field equals nothing: ``$ne`` holds for it, every
other operator fails.
"""

from __future__ import annotations

from typing import Any

from redismem.errors import InvalidInput
from redismem.values import check_json_value

__all__ = ["OPERATORS", "check_filter", "matches"]

OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in"})


def check_filter(flt: object) -> dict[str, Any]:
    """A filter (``{}`` for None), or ``InvalidInput`` naming what is wrong."""
    if flt is None:
        return {}
    if type(flt) is not dict:
        raise InvalidInput(f"filter must be a dict, not {type(flt).__name__}")
    for path, condition in flt.items():
        if not isinstance(path, str) or not path:
            raise InvalidInput(f"filter fields must be non-empty str, got {path!r}")
        try:
            check_json_value(condition, f"filter[{path!r}]")
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        for op, operand in _operators(path, condition):
            if op not in OPERATORS:
                known = ", ".join(sorted(OPERATORS))
                raise InvalidInput(f"unknown filter operator {op!r} on {path!r} (known: {known})")
            if op == "$in" and type(operand) is not list:
                raise InvalidInput(f"$in on {path!r} needs a list, got {operand!r}")
    return flt


def matches(value: dict[str, Any], flt: dict[str, Any]) -> bool:
    """Whether an item's ``value`` meets every condition of a checked filter."""
    for path, condition in flt.items():
        field = _lookup(value, path)
        if not all(_holds(op, field, operand) for op, operand in _operators(path, condition)):
            return False
    return True


def _operators(path: str, condition: Any) -> list[tuple[str, Any]]:
    """``condition`` as ``(operator, operand)`` pairs; a plain value is ``$eq``."""
    if type(condition) is not dict or not any(k.startswith("$") for k in condition):
        return [("$eq", condition)]
    if not all(k.startswith("$") for k in condition):
        raise InvalidInput(f"filter on {path!r} mixes operators and plain fields")
    return list(condition.items())


_MISSING: Any = object()


def _lookup(value: Any, path: str) -> Any:
    """The value at a dotted path (list positions as numbers), or ``_MISSING``."""
    node = value
    for part in path.split("."):
        if type(node) is dict and part in node:
            node = node[part]
        elif type(node) is list and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: numbers by value, ``bool`` apart from numbers."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _compare(a: Any, b: Any) -> int | None:
    """-1, 0 or 1 for two numbers or two strings; None when they do not order."""
    if (_is_number(a) and _is_number(b)) or (type(a) is str and type(b) is str):
        return int(a > b) - int(a < b)
    return None


def _holds(op: str, field: Any, operand: Any) -> bool:
    if op == "$eq":
        return field is not _MISSING and _json_equal(field, operand)
    if op == "$ne":
        return field is _MISSING or not _json_equal(field, operand)
    if op == "$in":
        return field is not _MISSING and any(_json_equal(field, o) for o in operand)
    order = None if field is _MISSING else _compare(field, operand)
    if order is None:
        return False
    return {"$gt": order > 0, "$gte": order >= 0, "$lt": order < 0, "$lte": order <= 0}[op]
