"""``redismem.waiter.Waiter``: a future that resumes its task at once when
its result is set outside any task, and otherwise behaves as
``asyncio.Future`` does for the tasks awaiting it."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from redismem.waiter import Waiter

LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="none")


async def test_a_result_set_outside_any_task_resumes_the_task_before_returning() -> None:
    loop = asyncio.get_running_loop()
    waiter = Waiter(loop)
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
    waiter = Waiter(asyncio.get_running_loop())

    async def wait() -> object:
        return await waiter

    waiting = asyncio.create_task(wait())
    await asyncio.sleep(0)
    waiter.set_result(5)  # this test is a task: a direct resume would fail
    assert not waiting.done()
    assert await waiting == 5


async def test_the_task_resumes_in_its_own_context() -> None:
    loop = asyncio.get_running_loop()
    waiter = Waiter(loop)

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
    waiter = Waiter(loop)

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
    waiter = Waiter(asyncio.get_running_loop())

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
    waiter = Waiter(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await waiter
    assert waiter.cancelled()
    other = Waiter(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(_await(other), 0.01)


async def _await(waiter: Waiter) -> object:
    return await waiter


async def test_a_done_waiter_is_awaited_without_suspending_and_calls_back_later() -> None:
    loop = asyncio.get_running_loop()
    waiter = Waiter(loop)
    assert not waiter.done()
    with pytest.raises(asyncio.InvalidStateError):
        waiter.result()
    with pytest.raises(asyncio.InvalidStateError):
        waiter.exception()
    waiter.set_result("ready")
    assert await waiter == "ready"
    assert waiter.exception() is None
    called: list[Waiter] = []
    waiter.add_done_callback(called.append)
    assert called == []
    await asyncio.sleep(0)
    assert called == [waiter]


async def test_callbacks_can_be_removed() -> None:
    waiter = Waiter(asyncio.get_running_loop())
    called: list[Waiter] = []
    waiter.add_done_callback(called.append)
    waiter.add_done_callback(called.append)
    assert waiter.remove_done_callback(called.append) == 2
    assert waiter.remove_done_callback(called.append) == 0
    waiter.set_result(1)
    await asyncio.sleep(0)
    assert called == []


async def test_asyncio_treats_it_as_a_future() -> None:
    waiter = Waiter(asyncio.get_running_loop())
    assert asyncio.isfuture(waiter)
    assert waiter.get_loop() is asyncio.get_running_loop()
    gathered = asyncio.gather(_await(waiter))
    asyncio.get_running_loop().call_soon(waiter.set_result, "x")
    assert await gathered == ["x"]
