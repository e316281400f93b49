"""Human units for the ``redismem`` command's output: the one place that
turns seconds and bytes into ``7d 3h``, ``2h 13m``, ``45s``, ``120ms``,
``1.2 KB``, and moments into ``5m ago`` / ``in 3h 2m``.

Two units at most, the larger first: a reader wants the order of magnitude,
not the exact figure (``--json`` has exact numbers).
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["ago", "duration", "size", "until"]

_STEPS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float) -> str:
    """``120ms``, ``45s``, ``2m 5s``, ``2h 13m``, ``7d 3h`` (rounded to the
    smaller unit shown; a zero second unit is left out: ``3h``)."""
    if seconds < 0:
        return "-" + duration(-seconds)
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f}ms"
    whole = round(seconds)
    for i, (unit, size_s) in enumerate(_STEPS):
        if whole >= size_s or unit == "s":
            if unit == "s":
                return f"{whole}s"
            next_unit, next_s = _STEPS[i + 1]
            rounded = round(whole / next_s) * next_s  # to the smaller unit shown
            if i and rounded >= _STEPS[i - 1][1]:
                return duration(rounded)  # 23h 59m 40s: 1d
            big, rest = divmod(rounded, size_s)
            small = rest // next_s
            return f"{big}{unit} {small}{next_unit}" if small else f"{big}{unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def size(count: float) -> str:
    """``512 B``, ``1.2 KB``, ``3.4 MB``, ``1.0 GB`` (powers of 1024)."""
    if count < 1024:
        return f"{count:.0f} B"
    value = float(count)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """``5m ago`` (``-`` for no moment)."""
    if moment is None:
        return "-"
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    return "just now" if seconds < 1 else f"{duration(seconds)} ago"


def until(moment: datetime | None, now: datetime | None = None) -> str:
    """``in 3h 2m`` (``never`` for no moment)."""
    if moment is None:
        return "never"
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    return "now" if seconds < 1 else f"in {duration(seconds)}"
