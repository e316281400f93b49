"""A CPU hog for checking that the tests hold under load.

    python scripts/hog.py [PROCESSES] [SECONDS]

starts PROCESSES busy-looping processes (default: one per core) for at most
SECONDS seconds (default 600), then stops by itself: each child checks its
own deadline, and the parent kills any child still running when the time is
up, when it gets SIGTERM/SIGINT, or when it exits for any other reason. A
test run under load looks like::

    python scripts/hog.py 2 600 & hog=$!
    .venv/bin/python -m pytest -p no:cacheprovider tests/test_memory_ttl.py -q
    kill $hog

The children run at normal priority (``nice`` 0): the point is to take the
cores away from the tests, as other jobs on a shared CI box do.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time

#: Longest run accepted, so a forgotten hog cannot outlive a work session.
MAX_SECONDS = 3600.0


def _spin(deadline: float) -> None:
    """Busy-loop until ``deadline`` (``time.monotonic``), checking it every
    few hundred thousand iterations."""
    x = 0
    while time.monotonic() < deadline:
        for _ in range(200_000):
            x = (x * 1_103_515_245 + 12_345) & 0xFFFFFFFF


def run(processes: int, seconds: float) -> int:
    """Spin ``processes`` children for ``seconds``; returns an exit code."""
    deadline = time.monotonic() + seconds
    children = [
        multiprocessing.Process(target=_spin, args=(deadline,), daemon=True)
        for _ in range(processes)
    ]

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for child in children:
            child.start()
        print(
            f"hog: {processes} busy process(es) for {seconds:g} s (pid {os.getpid()})",
            file=sys.stderr,
            flush=True,
        )
        for child in children:
            child.join(max(0.0, deadline - time.monotonic()) + 5)
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
        for child in children:
            if child.pid is not None:
                child.join(5)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) > 2 or any(a in ("-h", "--help") for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        processes = int(argv[0]) if argv else os.cpu_count() or 1
        seconds = float(argv[1]) if len(argv) > 1 else 600.0
    except ValueError:
        print("hog: PROCESSES must be an integer and SECONDS a number", file=sys.stderr)
        return 2
    if not 1 <= processes <= 64 or not 0 < seconds <= MAX_SECONDS:
        print(f"hog: 1 <= PROCESSES <= 64 and 0 < SECONDS <= {MAX_SECONDS:g}", file=sys.stderr)
        return 2
    return run(processes, seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
