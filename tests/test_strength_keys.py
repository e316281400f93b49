"""Key layout details the mutation run found unpinned (see docs/mutation-testing.md).

Through ``KeyLayout`` (exported) and the documented functions of
``redismem.core.keys`` only.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from redismem import InvalidInput, KeyLayout

USERS = ["alice", "bob smith", "é{x}:*", "u%41"]


@pytest.mark.parametrize("user_id", USERS)
def test_each_users_pending_index_matches_the_sweep_pattern(user_id: str) -> None:
    # The sweep finds due sessions by scanning pending_pattern(); a pending
    # key it cannot match would never be summarized.
    layout = KeyLayout("ns")
    pending = layout.pending(user_id)
    assert fnmatchcase(pending, layout.pending_pattern())
    assert pending == layout.user_prefix(user_id) + "pending"
    assert layout.session("x", "s").pending == layout.pending("x")
    # ...and nothing else of the user's matches it.
    for other in (
        layout.sessions(user_id),
        layout.tagidx(user_id),
        layout.session(user_id, "s").meta,
    ):
        assert not fnmatchcase(other, layout.pending_pattern())


def test_the_documented_layout_of_one_user() -> None:
    layout = KeyLayout("ns")
    assert layout.sessions("alice") == "ns:{u:alice}:sessions"
    assert layout.tagidx("alice") == "ns:{u:alice}:tagidx"
    assert layout.pending("alice") == "ns:{u:alice}:pending"
    assert layout.pending_pattern() == "ns:{u:*:pending"
    # After a clear, the user's keys live in a new epoch; the guard in none.
    assert layout.pending("alice", 17) == "ns:{u:alice}:@17:pending"
    assert layout.session("alice", "s", 17).msgs == "ns:{u:alice}:@17:s:s:msgs"
    assert layout.recall("alice", 17).docs == "ns:{u:alice}:@17:r:docs"
    assert layout.store("alice", 17).refs == "ns:{u:alice}:@17:kv:refs"
    assert layout.guard("alice") == "ns:{u:alice}:guard"


@pytest.mark.parametrize("user_id", USERS)
@pytest.mark.parametrize("epoch", [0, 1, 1796173567980])
def test_every_epoch_parses_back_and_only_pending_indexes_parse_as_pending(
    user_id: str, epoch: int
) -> None:
    layout = KeyLayout("ns")
    keys = layout.session(user_id, "s:1", epoch)
    assert (keys.guard, keys.epoch) == (layout.guard(user_id), epoch)
    for key in (keys.msgs, keys.meta, keys.pending, layout.recall(user_id, epoch).docs):
        parsed = layout.parse_key(key)
        assert (parsed.user_id, parsed.epoch) == (user_id, epoch)
        assert fnmatchcase(key, layout.user_pattern(user_id))
    pending = layout.parse_pending(keys.pending)
    assert pending is not None and (pending.user_id, pending.epoch) == (user_id, epoch)
    for other in (keys.meta, keys.sessions, layout.recall(user_id, epoch).prefix + "t:pending"):
        assert layout.parse_pending(other) is None
    assert layout.parse_key(layout.guard(user_id)).kind == "guard"


@pytest.mark.parametrize("key", ["ns:{u:a}:@:sessions", "ns:{u:a}:@01:sessions", "ns:{u:a}:@x:s"])
def test_a_malformed_epoch_is_refused(key: str) -> None:
    with pytest.raises(InvalidInput):
        KeyLayout("ns").parse_key(key)


@pytest.mark.parametrize(
    "key",
    [
        # A foreign namespace whose prefix has the same length as ours: the
        # rest of the key would parse as a user key if the prefix went unchecked.
        "xx:{u:alice}:sessions",
        "NS:{u:alice}:s:s1:msgs",
        "ns:{x:alice}:sessions",
    ],
)
def test_parse_key_refuses_keys_of_other_namespaces_of_the_same_length(key: str) -> None:
    with pytest.raises(InvalidInput):
        KeyLayout("ns").parse_key(key)
