"""Each user's epoch as a client last saw it, and running a call in the current one.

Every key of a user lies in an epoch, and a clear starts a new one (see
``redismem.core.guard``). A client remembers each user's epoch; a script
built for an older one is refused with the current epoch (``EpochMoved``),
and ``in_epoch`` builds the keys again and runs the call again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redismem.core.connection import EpochMoved
from redismem.errors import BackendError

__all__ = ["EpochMoved", "UserEpochs", "in_epoch"]

T = TypeVar("T")

#: Epochs remembered per client (users cleared while it runs: few).
_EPOCHS_KEPT = 65536
#: Times a call builds its keys again before giving up (the user cleared that
#: many times during one call).
_EPOCH_TRIES = 8


class UserEpochs:
    """The epoch of each user as this client last saw it (0 when unknown:
    most users are never cleared). A wrong guess costs one more round trip:
    the script refuses it and names the current epoch."""

    def __init__(self) -> None:
        self._epochs: OrderedDict[str, int] = OrderedDict()

    def get(self, user_id: str) -> int:
        return self._epochs.get(user_id, 0)

    def set(self, user_id: str, epoch: int) -> None:
        if not epoch:
            self._epochs.pop(user_id, None)
            return
        self._epochs[user_id] = epoch
        self._epochs.move_to_end(user_id)
        if len(self._epochs) > _EPOCHS_KEPT:
            self._epochs.popitem(last=False)


async def in_epoch(epochs: UserEpochs, user_id: str, op: Callable[[int], Awaitable[T]]) -> T:
    """``op(epoch)`` for the user's current epoch: run again, with keys built
    anew, when the user was cleared since this client last looked."""
    for _ in range(_EPOCH_TRIES):
        try:
            return await op(epochs.get(user_id))
        except EpochMoved as moved:
            epochs.set(user_id, moved.current)
    raise BackendError(f"user {user_id!r} was cleared {_EPOCH_TRIES} times during one call")
