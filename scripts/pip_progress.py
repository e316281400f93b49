"""Run ``python -m pip install ARGS`` and say how far it got, for scripts/setup.

pip is silent for minutes at a time in a script (no terminal, no progress
bars), and its full output is too long to read. This prints a line with the
``setup:`` prefix when the phase changes (resolving, building, installing),
while installing a count of the packages already in place (``installing 17
packages (5/17)``, from the ``.dist-info`` directories that appear), and a
line at least every few seconds whatever happens. On failure it prints the
end of pip's output and exits with pip's status.

Usage: python scripts/pip_progress.py [--every SECONDS] -- PIP-INSTALL-ARGS...
Standard library only: it runs in a fresh virtualenv, before anything is installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import threading
import time
from collections import deque
from pathlib import Path

TAIL_LINES = 60
#: pip's lines that start a phase before the dependencies are collected.
PHASES = (
    ("Obtaining ", "reading the package"),
    ("Installing build dependencies", "installing the build backend (setuptools)"),
    ("Checking if build backend", "preparing the package's metadata"),
    ("Preparing editable metadata", "preparing the package's metadata"),
    ("Preparing metadata", "preparing the package's metadata"),
)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def installed(site: Path) -> set[str]:
    """The ``.dist-info`` directories under ``site``."""
    try:
        return {p.name for p in site.iterdir() if p.name.endswith(".dist-info")}
    except OSError:
        return set()


class Progress:
    def __init__(self, every: float) -> None:
        self.every = every
        self.started = time.monotonic()
        self.last_said = 0.0
        self.phase = "starting pip"
        self.collected: list[str] = []
        self.to_install: list[str] = []
        self.before: set[str] = set()
        self.site = Path(sysconfig.get_paths()["purelib"])
        self.lock = threading.Lock()
        self.done = threading.Event()

    def say(self, text: str) -> None:
        with self.lock:
            elapsed = time.monotonic() - self.started
            print(f"setup: {text} [{elapsed:.0f} s]", file=sys.stderr, flush=True)
            self.last_said = time.monotonic()

    def status(self) -> str:
        if self.to_install:
            new = installed(self.site) - self.before
            names = {normalize(d.split("-")[0]) for d in new}
            count = sum(normalize(n) in names for n in self.to_install)
            total = len(self.to_install)
            return f"installing {total} packages ({count}/{total})"
        if self.collected:
            count = len(self.collected)
            return f"resolving: {count} package{'s' * (count != 1)} so far ({self.collected[-1]})"
        return self.phase

    def line(self, text: str) -> None:
        """One line of pip's output."""
        text = text.strip()
        for start, phase in PHASES:
            if text.startswith(start) and phase != self.phase:
                self.phase = phase
                if not self.collected:
                    self.say(phase)
        if match := re.match(r"Collecting (\S+?)(?:[<>=!~;\[ (]|$)", text):
            self.collected.append(match.group(1))
            if time.monotonic() - self.last_said >= 1.0:
                self.say(self.status())
        elif match := re.match(r"Building (?:wheel|editable) for (\S+)", text):
            self.say(f"building {match.group(1)}")
        elif text.startswith("Installing collected packages:"):
            names = text.split(":", 1)[1]
            self.before = installed(self.site)
            self.to_install = [n.strip() for n in names.split(",") if n.strip()]
            self.say(self.status())

    def tick(self) -> None:
        """Say where we are when nothing was said for ``every`` seconds."""
        while not self.done.wait(0.5):
            if time.monotonic() - self.last_said >= self.every:
                self.say(self.status())


def main(argv: list[str]) -> int:
    every = 3.0
    if argv[:1] == ["--every"]:
        every, argv = float(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    command = [sys.executable, "-m", "pip", "install", "--progress-bar", "off", *argv]
    progress = Progress(every)
    progress.say("pip install " + " ".join(argv))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    ticker = threading.Thread(target=progress.tick, daemon=True)
    ticker.start()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    for raw in process.stdout:
        tail.append(raw.rstrip("\n"))
        progress.line(raw)
    status = process.wait()
    progress.done.set()
    ticker.join()
    if status != 0:
        print(f"setup: pip install failed (exit {status}); its output:", file=sys.stderr)
        print("\n".join(tail), file=sys.stderr)
        return status
    count = len(progress.to_install)
    progress.say(f"installed {count} package{'s' * (count != 1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
