"""The suite's own rules: a test looks at its own keys only (the server is
shared), and leaves none behind."""

from __future__ import annotations

import pytest
from helpers import keys_matching, pttls, snapshot


@pytest.mark.parametrize("pattern", ["*", "**", ""])
async def test_a_snapshot_of_the_whole_database_is_refused(pattern: str) -> None:
    # Another test's keys come and go in the shared database: a comparison of
    # all of it fails at random (a key expiring between two snapshots).
    for look in (snapshot, keys_matching, pttls):
        with pytest.raises(ValueError, match="whole shared database"):
            await look(None, pattern)
