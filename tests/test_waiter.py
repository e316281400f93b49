"""``redismem.core.replies.ReplyFuture``: a future that resumes its task at once when
its result is set outside any task, and otherwise behaves as
``asyncio.Future`` does for the tasks awaiting it."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from redismem.core.replies import ReplyFuture

LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="none")


async def test_a_result_set_outside_any_task_resumes_the_task_before_returning() -> None:
    loop = asyncio.get_running_loop()
    waiter = ReplyFuture(loop)
    seen: list[object] = []

    async def wait() -> None:
        seen.append(await waiter)

    task = asyncio.create_task(wait())
    await asyncio.sleep(0)  # the task now waits on the waiter
    assert not waiter.done()

    def from_the_loop() -> None:  # as data_received runs: a callback, no task
        assert asyncio.current_task() is None
        waiter.set_result("reply")
        assert seen == ["reply"]  # resumed inside set_result
        assert task.done()

    loop.call_soon(from_the_loop)
    await task
    assert waiter.result() == "reply" and not waiter.cancelled()


async def test_a_result_set_from_inside_a_task_resumes_the_other_on_the_next_iteration() -> None:
    waiter = ReplyFuture(asyncio.get_running_loop())

    async def wait() -> object:
        return await waiter

    waiting = asyncio.create_task(wait())
    await asyncio.sleep(0)
    waiter.set_result(5)  # this test is a task: a direct resume would fail
    assert not waiting.done()
    assert await waiting == 5


async def test_the_task_resumes_in_its_own_context() -> None:
    loop = asyncio.get_running_loop()
    waiter = ReplyFuture(loop)

    async def wait() -> str:
        LABEL.set("task")
        await waiter
        return LABEL.get()

    task = asyncio.create_task(wait())
    await asyncio.sleep(0)
    loop.call_soon(waiter.set_result, None)
    assert await task == "task"
    assert LABEL.get() == "none"


async def test_an_error_reaches_the_awaiting_task() -> None:
    loop = asyncio.get_running_loop()
    waiter = ReplyFuture(loop)

    async def wait() -> object:
        return await waiter

    task = asyncio.create_task(wait())
    await asyncio.sleep(0)
    loop.call_soon(waiter.set_exception, ConnectionError("reset"))
    with pytest.raises(ConnectionError, match="reset"):
        await task
    assert isinstance(waiter.exception(), ConnectionError)
    with pytest.raises(asyncio.InvalidStateError):
        waiter.set_result(1)


async def test_cancelling_the_task_cancels_the_waiter_and_a_late_result_is_refused() -> None:
    waiter = ReplyFuture(asyncio.get_running_loop())

    async def wait() -> object:
        return await waiter

    task = asyncio.create_task(wait())
    await asyncio.sleep(0)
    task.cancel("gave up")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiter.cancelled() and waiter.done()
    with pytest.raises(asyncio.CancelledError):
        waiter.result()
    with pytest.raises(asyncio.CancelledError):
        waiter.exception()
    assert not waiter.cancel()
    with pytest.raises(asyncio.InvalidStateError):
        waiter.set_result("late")


async def test_timeouts_work_around_it() -> None:
    waiter = ReplyFuture(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await waiter
    assert waiter.cancelled()
    other = ReplyFuture(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(_await(other), 0.01)


async def _await(waiter: ReplyFuture) -> object:
    return await waiter


async def test_a_done_waiter_is_awaited_without_suspending_and_calls_back_later() -> None:
    loop = asyncio.get_running_loop()
    waiter = ReplyFuture(loop)
    assert not waiter.done()
    with pytest.raises(asyncio.InvalidStateError):
        waiter.result()
    with pytest.raises(asyncio.InvalidStateError):
        waiter.exception()
    waiter.set_result("ready")
    assert await waiter == "ready"
    assert waiter.exception() is None
    called: list[ReplyFuture] = []
    waiter.add_done_callback(called.append)
    assert called == []
    await asyncio.sleep(0)
    assert called == [waiter]


async def test_callbacks_can_be_removed() -> None:
    waiter = ReplyFuture(asyncio.get_running_loop())
    called: list[ReplyFuture] = []
    waiter.add_done_callback(called.append)
    waiter.add_done_callback(called.append)
    assert waiter.remove_done_callback(called.append) == 2
    assert waiter.remove_done_callback(called.append) == 0
    waiter.set_result(1)
    await asyncio.sleep(0)
    assert called == []


async def test_asyncio_treats_it_as_a_future() -> None:
    waiter = ReplyFuture(asyncio.get_running_loop())
    assert asyncio.isfuture(waiter)
    assert waiter.get_loop() is asyncio.get_running_loop()
    gathered = asyncio.gather(_await(waiter))
    asyncio.get_running_loop().call_soon(waiter.set_result, "x")
    assert await gathered == ["x"]


async def test_a_callback_without_a_context_runs_inside_set_result() -> None:
    loop = asyncio.get_running_loop()
    waiter = ReplyFuture(loop)
    called: list[ReplyFuture] = []
    waiter.add_done_callback(called.append)

    def from_the_loop() -> None:
        waiter.set_result(1)
        assert called == [waiter]

    loop.call_soon(from_the_loop)
    await asyncio.sleep(0.01)
    assert called == [waiter]


async def test_removing_one_callback_keeps_the_others() -> None:
    waiter = ReplyFuture(asyncio.get_running_loop())
    kept: list[ReplyFuture] = []
    dropped: list[ReplyFuture] = []
    waiter.add_done_callback(dropped.append)
    waiter.add_done_callback(kept.append)
    waiter.add_done_callback(dropped.append)
    assert waiter.remove_done_callback(dropped.append) == 2
    waiter.set_result(None)
    await asyncio.sleep(0)
    assert kept == [waiter] and dropped == []


async def test_set_twice_and_cancel_answer_as_a_future_does() -> None:
    loop = asyncio.get_running_loop()
    failed = ReplyFuture(loop)
    failed.set_exception(ValueError("first"))
    with pytest.raises(asyncio.InvalidStateError):
        failed.set_exception(ValueError("second"))
    with pytest.raises(asyncio.InvalidStateError):
        failed.set_result(1)
    assert failed.cancel() is False
    with pytest.raises(ValueError, match="first"):
        failed.result()

    pending = ReplyFuture(loop)
    assert pending.cancel("because") is True
    assert pending.cancel() is False
    with pytest.raises(asyncio.CancelledError) as raised:
        pending.result()
    assert raised.value.args == ("because",)
    plain = ReplyFuture(loop)
    assert plain.cancel() is True
    with pytest.raises(asyncio.CancelledError) as raised:
        plain.result()
    assert raised.value.args == ()


def test_awaiting_it_outside_a_task_is_refused() -> None:
    """Driven by hand rather than by a task, a waiter resumed while still
    pending says so, as ``asyncio.Future`` does."""
    loop = asyncio.new_event_loop()
    try:
        waiter = ReplyFuture(loop)
        steps = waiter.__await__()
        assert next(steps) is waiter
        with pytest.raises(RuntimeError, match="await wasn't used with future"):
            steps.send(None)
    finally:
        loop.close()
