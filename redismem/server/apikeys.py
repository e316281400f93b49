"""API keys: their form, their roles, and the keys file that holds them hashed.

A key is ``rmk_<id>_<secret>``: ``id`` is 12 hex digits (it names the key in
logs and in the file), ``secret`` 32 random bytes, URL-safe base64. The
server never stores a key: the keys file holds one JSON object per line,
``{"id", "namespace", "role", "sha256", "name"}``, ``sha256`` being the hex
digest of the whole key, compared with ``hmac.compare_digest``.

Each key is bound to one namespace and one role; a role allows what the roles
below it allow (``read`` < ``write`` < ``admin``). ``redismem keys create``
appends a line and prints the key once. The server reads the file again when
it changes (checked at most once a second), so a key added or removed takes
effect without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from redismem.core.keys import KeyLayout
from redismem.errors import InvalidInput

__all__ = [
    "ROLES",
    "ApiKey",
    "KeyRing",
    "Role",
    "allows",
    "create_key",
    "hash_key",
    "key_id",
    "load_keys",
    "new_key",
]

Role = Literal["read", "write", "admin"]
#: The roles, weakest first.
ROLES: tuple[Role, ...] = ("read", "write", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES)}
_KEY_RE = re.compile(r"rmk_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
#: Seconds between two looks at the keys file's modification time.
RELOAD_EVERY = 1.0


def allows(role: Role, needed: Role) -> bool:
    """Whether a key of ``role`` may do what needs ``needed``."""
    return _RANK[role] >= _RANK[needed]


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One line of the keys file."""

    id: str
    namespace: str
    role: Role
    sha256: str
    name: str = ""

    def to_line(self) -> str:
        return json.dumps(asdict(self), separators=(", ", ": ")) + "\n"


def new_key() -> tuple[str, str]:
    """A fresh key and its id."""
    ident = secrets.token_hex(6)
    return f"rmk_{ident}_{secrets.token_urlsafe(32)}", ident


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_id(key: str) -> str | None:
    """The id of a well-formed key, else None."""
    found = _KEY_RE.fullmatch(key)
    return found.group(1) if found else None


def _check_role(role: object) -> Role:
    if role not in _RANK:
        raise InvalidInput(f"role must be read, write or admin, got {role!r}")
    return role


def _parse_line(line: str, where: str) -> ApiKey:
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        record = ApiKey(
            id=str(data["id"]),
            namespace=str(data["namespace"]),
            role=_check_role(data["role"]),
            sha256=str(data["sha256"]),
            name=str(data.get("name") or ""),
        )
    except (ValueError, KeyError, InvalidInput) as exc:
        raise InvalidInput(f"{where}: not a key record ({exc})") from None
    if not re.fullmatch(r"[0-9a-f]{12}", record.id) or not re.fullmatch(
        r"[0-9a-f]{64}", record.sha256
    ):
        raise InvalidInput(f"{where}: id must be 12 and sha256 64 hex digits")
    return record


def load_keys(path: str | Path) -> dict[str, ApiKey]:
    """The keys of a keys file by id; blank lines and ``#`` comments are
    skipped. A malformed line or an id given twice raises ``InvalidInput``
    naming the line."""
    found: dict[str, ApiKey] = {}
    text = Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        record = _parse_line(line, f"{path}, line {number}")
        if record.id in found:
            raise InvalidInput(f"{path}, line {number}: key id {record.id} is there twice")
        found[record.id] = record
    return found


def create_key(
    path: str | Path, *, namespace: str, role: str, name: str = ""
) -> tuple[str, ApiKey]:
    """Make a key for ``namespace`` with ``role``, append its hashed record to
    the keys file (created readable by its owner only) and return the key
    (shown once; only its hash is kept) and the record."""
    KeyLayout(namespace)  # InvalidInput for a name no namespace can have
    checked = _check_role(role)
    if "\n" in name:
        raise InvalidInput("a key's name is one line")
    key, ident = new_key()
    record = ApiKey(id=ident, namespace=namespace, role=checked, sha256=hash_key(key), name=name)
    target = Path(path)
    if target.exists():
        load_keys(target)  # refuse to append to a file that is not a keys file
    descriptor = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(descriptor, "a", encoding="utf-8") as out:
        out.write(record.to_line())
    return key, record


class KeyRing:
    """The keys of a keys file, read again when the file changes.

    ``lookup(key)`` gives the record of a valid key, else None; a file that
    became unreadable or malformed keeps the keys read last (and is logged
    by the caller through ``error``)."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._keys: dict[str, ApiKey] = {}
        #: Why the last reload failed (None: it did not).
        self.error: str | None = None
        self._reload(time.monotonic(), strict=True)

    @property
    def path(self) -> Path:
        return self._path

    def __len__(self) -> int:
        return len(self._keys)

    def _reload(self, now: float, *, strict: bool = False) -> None:
        self._checked = now
        try:
            info = self._path.stat()
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            if stamp == self._stamp:
                return
            keys = load_keys(self._path)
        except (OSError, InvalidInput) as exc:
            if strict:
                raise
            self.error = str(exc)
            return
        self._keys, self._stamp, self.error = keys, stamp, None

    def lookup(self, presented: str) -> ApiKey | None:
        now = time.monotonic()
        if now - self._checked >= RELOAD_EVERY:
            with self._lock:
                if now - self._checked >= RELOAD_EVERY:
                    self._reload(now)
        ident = key_id(presented)
        if ident is None:
            return None
        record = self._keys.get(ident)
        if record is None or not hmac.compare_digest(record.sha256, hash_key(presented)):
            return None
        return record
