"""Field paths into an item's JSON value: the text the long-term store indexes.

``put(..., index=[...])`` names the fields whose text is searchable::

    "title"            the field "title" of the value
    "author.name"      a field of a nested object
    "tags[0]"          the first element of a list
    "sections[*].body" the field "body" of every element of a list
    "$"                the whole value

A path selects nothing where the value has no such field (no error). Every
string inside what a path selects is indexed (strings nested in lists and
objects too, never dict keys); ``index=None`` indexes every string of the
value.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from redismem.errors import InvalidInput
from redismem.recall.terms import terms

__all__ = ["check_index", "indexed_terms", "path_steps"]

_SEGMENT_RE = re.compile(r"([^\[\]]*)((?:\[(?:\*|\d+)\])*)")
_INDEX_RE = re.compile(r"\[(\*|\d+)\]")


def check_index(index: object) -> list[str] | None:
    """``None`` (every string), ``False`` (nothing: ``[]``) or field paths."""
    if index is None:
        return None
    if index is False:
        return []
    if not isinstance(index, list | tuple):
        raise InvalidInput(f"index must be None, False or a list of field paths, not {index!r}")
    for path in index:
        if not isinstance(path, str) or not path:
            raise InvalidInput(f"index paths must be non-empty str, got {path!r}")
        path_steps(path)
    return list(index)


def path_steps(path: str) -> list[str | int | None]:
    """``"a.b[0].c[*]"`` -> ``["a", "b", 0, "c", None]`` (None: every element);
    ``"$"`` is the whole value."""
    if path == "$":
        return []
    steps: list[str | int | None] = []
    for segment in path.split("."):
        match = _SEGMENT_RE.fullmatch(segment)
        if match is None or not (match.group(1) or match.group(2)):
            raise InvalidInput(f"index path {path!r} is not a field path like 'a.b' or 'a[*].b'")
        if match.group(1):
            steps.append(match.group(1))
        for index in _INDEX_RE.findall(match.group(2)):
            steps.append(None if index == "*" else int(index))
    return steps


def indexed_terms(value: dict[str, Any], paths: list[str] | None) -> Counter[str]:
    """Term frequencies of the indexed text (``paths`` None: every string)."""
    if paths is None:
        texts = list(_strings(value))
    else:
        texts = [
            text
            for path in paths
            for node in _select(value, path_steps(path))
            for text in _strings(node)
        ]
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(terms(text))
    return counts


def _select(node: Any, steps: Sequence[str | int | None]) -> Iterator[Any]:
    if not steps:
        yield node
        return
    step, rest = steps[0], steps[1:]
    if isinstance(step, str):
        if type(node) is dict and step in node:
            yield from _select(node[step], rest)
    elif type(node) is list:
        if step is None:
            for element in node:
                yield from _select(element, rest)
        elif step < len(node):
            yield from _select(node[step], rest)


def _strings(node: Any) -> Iterator[str]:
    """Every string value inside ``node`` (not dict keys)."""
    if type(node) is str:
        yield node
    elif type(node) is list:
        for element in node:
            yield from _strings(element)
    elif type(node) is dict:
        for element in node.values():
            yield from _strings(element)
