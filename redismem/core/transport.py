"""A lean, multiplexed connection for the session scripts' hot path.

redis-py's asyncio client spends more time per call in Python than Redis
spends running a session script: a pool checkout, a per-connection lock, a
stream reader and an encoder per command. ``MultiplexedConnection`` is one TCP (or Unix
socket) connection speaking RESP2 through an ``asyncio.Protocol``, replies
parsed and commands packed by hiredis; any number of tasks share it, each
call queued behind the others (pipelined, replies matched in order). It
runs ``EVALSHA`` (reloading a script the server lost on ``NOSCRIPT``, with
an optional ``WAIT`` for replicas on the same connection) and ``MULTI``
blocks, for ``ScriptRunner`` and ``Memory.atomic``; everything else goes
through redis-py. ``evalsha_now`` sends before returning, so a write builds
its result while Redis runs the script; a reply resumes its task at once
(``redismem.core.replies``).

Errors are redis-py's own exception types (replies are classified by
redis-py's parser), so ``connection.map_error`` and ``RetryPolicy`` treat
both paths alike. Nothing here retries: ``RetryPolicy`` does, for both paths
(``MultiplexedCluster`` follows ``MOVED``/``ASK`` redirects, as redis-py does:
a redirected call did not run). Each call carries a
deadline (``RetryPolicy.run_until``), checked by one timer per connection
rather than one per call: a call past its deadline, or one cancelled while
its reply is outstanding, drops the connection, every call still waiting
on it fails (each is retried by its own policy; the scripts are
idempotent), and the next call connects again. A closed or reset
connection fails the same way, and a ``READONLY`` reply (a demoted master)
drops it too.

``open_multiplexed`` gives a ``MultiplexedConnection`` for ``redis://`` and ``unix://`` URLs and for
``redis+sentinel://`` (the master is asked of the sentinels at every
connect), ``MultiplexedCluster`` (one link per master, routed by slot) for
``redis+cluster://``; TLS and the embedded backend keep redis-py alone.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import hiredis
import redis.exceptions as rexc
from redis._parsers import BaseParser  # redis-py's reply-error classifier
from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOT_COUNT
from redis.crc import key_slot

from redismem.core.replies import ReplyFuture
from redismem.core.urls import parse_url

__all__ = ["MultiplexedCluster", "MultiplexedConnection", "open_multiplexed"]

#: The connection classes ``open_multiplexed`` can stand in for.
_SUPPORTED = ("Connection", "UnixDomainSocketConnection")


def pack_command(args: Sequence[Any]) -> bytes:
    """One command in RESP (an array of bulk strings), packed by hiredis."""
    try:
        packed: bytes = hiredis.pack_command(tuple(args))
    except TypeError as exc:
        raise rexc.DataError(f"cannot send {args!r} to Redis: {exc}") from exc
    return packed


def _evalsha_commands(
    sha: str, keys: Sequence[Any], args: Sequence[Any], replicas: int, replica_timeout_ms: int
) -> list[tuple[Any, ...]]:
    """``EVALSHA``, then a ``WAIT`` for ``replicas`` when there are any."""
    command = ("EVALSHA", sha, len(keys), *keys, *args)
    if not replicas:
        return [command]
    return [command, ("WAIT", replicas, replica_timeout_ms)]


def _error(reply: hiredis.ReplyError) -> rexc.RedisError:
    error: rexc.RedisError = BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call]
    return error


@contextmanager
def _settled(futures: Sequence[ReplyFuture]) -> Iterator[None]:
    """When one of several replies raises, retrieve or cancel the others (so
    no error goes unretrieved)."""
    try:
        yield
    except BaseException:
        for future in futures:
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()
        raise


class _Group:
    """The calls of one group (a ``MULTI`` block) in ``_Protocol.waiting``,
    one entry per call: their replies are collected and resolve the group's
    one future with the list, so the waiting task resumes once rather than
    once per reply. Duck-types the part of ``ReplyFuture`` the protocol uses."""

    __slots__ = ("future", "replies", "size")

    def __init__(self, future: ReplyFuture, size: int) -> None:
        self.future = future
        self.replies: list[Any] = []
        self.size = size

    def done(self) -> bool:
        return self.future.done()

    def set_result(self, reply: Any) -> None:
        self.replies.append(reply)
        if len(self.replies) == self.size:
            self.future.set_result(self.replies)

    def set_exception(self, error: BaseException) -> None:
        self.future.set_exception(error)


class _Protocol(asyncio.Protocol):
    """The connection's state: the reply parser and the calls waiting, in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[ReplyFuture | _Group] = deque()
        #: The loop time by which each waiting call wants its reply.
        self.deadlines: deque[float] = deque()
        self.closed = False
        self._reader = hiredis.Reader()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self.close(rexc.ConnectionError(f"Protocol error from Redis: {exc}"))
                return
            if reply is False:
                return
            if not self.waiting:
                self.close(rexc.ConnectionError("Redis sent a reply nobody asked for"))
                return
            waiter = self.waiting.popleft()
            self.deadlines.popleft()
            if not waiter.done():
                # Resumes the waiting task now (see redismem.core.replies), which
                # may send more calls or drop this connection.
                waiter.set_result(reply)
                if self.closed:
                    return

    def connection_lost(self, exc: Exception | None) -> None:
        detail = f": {exc}" if exc else ""
        self._fail(rexc.ConnectionError(f"Connection closed by server{detail}."))

    def send(
        self, commands: Sequence[Sequence[Any]], deadline: float = math.inf
    ) -> list[ReplyFuture]:
        """Queue ``commands``; their replies are due by ``deadline`` (loop time)."""
        if self.closed or self.transport is None:
            raise rexc.ConnectionError("Connection closed.")
        loop = asyncio.get_running_loop()
        if len(commands) == 1:
            data = pack_command(commands[0])
            futures = [ReplyFuture(loop)]
        else:
            data = b"".join([pack_command(command) for command in commands])
            futures = [ReplyFuture(loop) for _ in commands]
        self.waiting.extend(futures)
        self.deadlines.extend([deadline] * len(futures))
        self.transport.write(data)
        if self._timer is None and deadline < math.inf:
            self._timer = loop.call_at(deadline, self._check_deadline)
        return futures

    def send_group(self, commands: Sequence[Sequence[Any]], deadline: float) -> ReplyFuture:
        """``send``, with one future for the list of the replies."""
        if self.closed or self.transport is None:
            raise rexc.ConnectionError("Connection closed.")
        loop = asyncio.get_running_loop()
        data = b"".join([pack_command(command) for command in commands])
        future = ReplyFuture(loop)
        group = _Group(future, len(commands))
        self.waiting.extend([group] * len(commands))
        self.deadlines.extend([deadline] * len(commands))
        self.transport.write(data)
        if self._timer is None and deadline < math.inf:
            self._timer = loop.call_at(deadline, self._check_deadline)
        return future

    def _check_deadline(self) -> None:
        """The watchdog: one timer per connection, not one per call. A call
        past its deadline means the server is stalled or the connection half
        dead: every waiting call fails (each policy retries its own) and the
        connection is dropped, as a per-call timeout would have done."""
        self._timer = None
        if self.closed or not self.deadlines:
            return
        loop = asyncio.get_running_loop()
        earliest = min(self.deadlines)
        if earliest <= loop.time():
            self.close(rexc.TimeoutError("Redis did not answer in time"))
        elif earliest < math.inf:
            self._timer = loop.call_at(earliest, self._check_deadline)

    def close(self, error: rexc.RedisError) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._fail(error)

    def _fail(self, error: rexc.RedisError) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.deadlines.clear()
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)


class MultiplexedConnection:
    """One multiplexed connection to a standalone Redis (see the module docstring)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 6379,
        path: str | None = None,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float | None = None,
        resolve: Callable[[], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        self._resolve = resolve
        self._host = host
        self._port = port
        self._path = path
        self._db = db
        self._username = username
        self._password = password
        self._connect_timeout = connect_timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[_Protocol] | None = None
        self._closed = False

    @property
    def where(self) -> str:
        return self._path or f"{self._host}:{self._port}"

    async def execute(self, *args: Any, key: Any = None, deadline: float = math.inf) -> Any:
        """Send one command and return its reply; an error reply raises.

        ``deadline`` (every method takes one): the loop time by which the
        reply must have come, else ``TimeoutError`` and the connection is
        dropped (see ``_Protocol._check_deadline``). ``key`` is for
        ``MultiplexedCluster``' routing; one server ignores it."""
        (reply,) = await self.pipeline([args], deadline=deadline)
        return reply

    async def pipeline(
        self, commands: Sequence[Sequence[Any]], *, deadline: float = math.inf
    ) -> list[Any]:
        """Send ``commands`` at once and return their replies; the first
        error reply raises (after every reply has arrived)."""
        return self._checked(await self._replies(commands, deadline))

    def _checked(self, replies: list[Any]) -> list[Any]:
        """``replies``, unless one is an error reply: the first raises."""
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                raise self._failed(reply)
        return replies

    async def evalsha(
        self,
        sha: str,
        source: str,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        replicas: int = 0,
        replica_timeout_ms: int = 0,
        deadline: float = math.inf,
    ) -> Any:
        """Run a script by its digest, loading it first if the server lost it.

        With ``replicas``, the script's writes must also reach that many
        replicas within ``replica_timeout_ms`` (``WAIT``, sent with it): if
        they do not, ``TimeoutError`` (a retry waits again)."""
        commands = _evalsha_commands(sha, keys, args, replicas, replica_timeout_ms)
        protocol = self._live() or await self._connected()
        sent = protocol.send(commands, deadline)
        return await self._evalsha_replies(protocol, sent, commands, source, deadline)

    def evalsha_now(
        self,
        sha: str,
        source: str,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        replicas: int = 0,
        replica_timeout_ms: int = 0,
        deadline: float = math.inf,
    ) -> Awaitable[Any] | None:
        """``evalsha`` with the command sent before this returns, so the
        caller can work while Redis runs the script and await the reply
        after; None (nothing sent) when the connection is not up: then call
        ``evalsha``. The awaitable must be awaited (or closed)."""
        protocol = self._live()
        if protocol is None:
            return None
        commands = _evalsha_commands(sha, keys, args, replicas, replica_timeout_ms)
        sent = protocol.send(commands, deadline)
        return self._evalsha_replies(protocol, sent, commands, source, deadline)

    async def _evalsha_replies(
        self,
        protocol: _Protocol,
        sent: list[ReplyFuture],
        commands: list[tuple[Any, ...]],
        source: str,
        deadline: float,
    ) -> Any:
        """The reply of ``_evalsha_commands`` ``sent``: the script's, once
        the ``WAIT`` (when there is one) saw enough replicas."""
        try:
            replies = self._checked(await self._awaited(protocol, sent))
        except rexc.NoScriptError:
            await self.execute("SCRIPT", "LOAD", source, deadline=deadline)
            replies = await self.pipeline(commands, deadline=deadline)
        if len(commands) > 1:
            _, replicas, timeout_ms = commands[1]
            if replies[1] < replicas:
                raise rexc.TimeoutError(
                    f"the write reached {replies[1]} of {replicas} replica(s) in {timeout_ms} ms"
                )
        return replies[0]

    async def transaction(
        self, commands: Sequence[Sequence[Any]], *, key: Any = None, deadline: float = math.inf
    ) -> list[Any]:
        """Run ``commands`` in one ``MULTI``/``EXEC``; the first error raises
        (a command refused when queued, else one that failed inside)."""
        protocol = self._live() or await self._connected()
        sent = protocol.send_group([("MULTI",), *commands, ("EXEC",)], deadline)
        try:
            replies: list[Any] = await sent
        except asyncio.CancelledError:
            self._cancelled(protocol, sent)
            raise
        for reply in replies[1:-1]:
            if isinstance(reply, hiredis.ReplyError):
                raise self._failed(reply)
        result = replies[-1]
        if isinstance(result, hiredis.ReplyError):
            raise self._failed(result)
        if result is None:
            raise rexc.WatchError("the transaction was aborted")
        for item in result:
            if isinstance(item, hiredis.ReplyError):
                raise self._failed(item)
        return list(result)

    async def _replies(self, commands: Sequence[Sequence[Any]], deadline: float) -> list[Any]:
        protocol = self._live() or await self._connected()
        return await self._awaited(protocol, protocol.send(commands, deadline))

    async def _awaited(self, protocol: _Protocol, sent: list[ReplyFuture]) -> list[Any]:
        """The replies to the calls ``sent`` on ``protocol``, in order."""
        if len(sent) == 1:  # the hot path's usual call: nothing else to settle
            return [await self._reply(protocol, sent[0])]
        with _settled(sent):
            return [await self._reply(protocol, waiter) for waiter in sent]

    def _failed(self, reply: hiredis.ReplyError) -> rexc.RedisError:
        error = _error(reply)
        if isinstance(error, rexc.ReadOnlyError) and self._protocol is not None:
            # A demoted master (failover): connect again, to the new one.
            self._drop(self._protocol, rexc.ConnectionError("the server became a replica"))
        return error

    async def aclose(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._protocol is not None:
            self._protocol.close(rexc.ConnectionError("the client was closed"))
            self._protocol = None

    async def _reply(self, protocol: _Protocol, future: ReplyFuture) -> Any:
        try:
            return await future
        except asyncio.CancelledError:
            self._cancelled(protocol, future)
            raise

    def _cancelled(self, protocol: _Protocol, future: ReplyFuture) -> None:
        """A call was cancelled awaiting ``future``: out of time with the reply
        outstanding, the connection may be stalled or half dead; start afresh
        rather than queue behind it."""
        if not future.done() or future.cancelled():
            self._drop(protocol, rexc.TimeoutError("a call on this connection ran out of time"))

    def _drop(self, protocol: _Protocol, error: rexc.RedisError) -> None:
        protocol.close(error)
        if self._protocol is protocol:
            self._protocol = None

    def _live(self) -> _Protocol | None:
        """The connection when it is up (else ``_connected`` makes one)."""
        protocol = self._protocol
        if protocol is None or protocol.closed:
            return None
        return protocol

    async def _connected(self) -> _Protocol:
        protocol = self._live()
        if protocol is not None:
            return protocol
        if self._closed:
            raise rexc.ConnectionError("the client was closed")
        if self._connecting is None:
            task = asyncio.get_running_loop().create_task(self._connect())
            task.add_done_callback(self._connected_done)
            self._connecting = task
        # Shielded: one caller running out of time must not abort the others'
        # connection attempt (it has its own time limit).
        return await asyncio.shield(self._connecting)

    def _connected_done(self, task: asyncio.Task[_Protocol]) -> None:
        if self._connecting is task:
            self._connecting = None
        if task.cancelled():
            return
        if task.exception() is None:
            self._protocol = task.result()

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                if self._resolve is not None:
                    self._host, self._port = await self._resolve()
                if self._path is not None:
                    _, protocol = await loop.create_unix_connection(_Protocol, self._path)
                else:
                    _, protocol = await loop.create_connection(_Protocol, self._host, self._port)
                await self._handshake(protocol)
        except (OSError, TimeoutError) as exc:
            detail = str(exc) or "no answer in time"
            raise rexc.ConnectionError(f"Error connecting to {self.where}: {detail}") from exc
        return protocol

    async def _handshake(self, protocol: _Protocol) -> None:
        commands: list[tuple[Any, ...]] = []
        if self._password is not None:
            if self._username:
                commands.append(("AUTH", self._username, self._password))
            else:
                commands.append(("AUTH", self._password))
        if self._db:
            commands.append(("SELECT", self._db))
        if not commands:
            return
        futures = protocol.send(commands)
        try:
            with _settled(futures):
                for future in futures:
                    reply = await future
                    if isinstance(reply, hiredis.ReplyError):
                        raise _error(reply)
        except BaseException:
            protocol.close(rexc.ConnectionError("handshake failed"))
            raise


class MultiplexedCluster:
    """One ``MultiplexedConnection`` per master of a Redis Cluster, each call routed by its
    first key's slot (a session script's keys share one slot).

    The slot map comes from ``CLUSTER SLOTS``, asked of the known masters and
    then the URL's seed nodes, so the client can always find the cluster
    again. A ``MOVED`` reply (resharding, failover) refreshes the map and
    sends the call again (it did not run); ``ASK`` sends it to the importing
    node after ``ASKING``; a connection error marks the map stale and raises
    (``RetryPolicy`` retries, on a fresh map).
    """

    #: Redirects followed within one call.
    MAX_REDIRECTS = 5

    def __init__(
        self,
        seeds: Sequence[tuple[str, int]],
        *,
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self._seeds = [f"{host}:{port}" for host, port in seeds]
        self._options: dict[str, Any] = {
            "username": username,
            "password": password,
            "connect_timeout": connect_timeout,
        }
        self._links: dict[str, MultiplexedConnection] = {}
        self._slots: list[str] = []
        self._refreshing: asyncio.Lock | None = None
        self._stale = True

    async def execute(self, *args: Any, key: Any, deadline: float = math.inf) -> Any:
        """One command, on the master of ``key``'s slot."""
        (reply,) = await self._routed(
            key, lambda link: link.pipeline([args], deadline=deadline), [args], deadline
        )
        return reply

    async def evalsha(
        self,
        sha: str,
        source: str,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        replicas: int = 0,
        replica_timeout_ms: int = 0,
        deadline: float = math.inf,
    ) -> Any:
        """``MultiplexedConnection.evalsha`` on the master of ``keys[0]``'s slot."""

        async def run(link: MultiplexedConnection) -> Any:
            return await link.evalsha(
                sha,
                source,
                keys,
                args,
                replicas=replicas,
                replica_timeout_ms=replica_timeout_ms,
                deadline=deadline,
            )

        return await self._routed(keys[0], run, None, deadline)

    def evalsha_now(
        self,
        sha: str,
        source: str,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        replicas: int = 0,
        replica_timeout_ms: int = 0,
        deadline: float = math.inf,
    ) -> Awaitable[Any] | None:
        """Never sends early (a call may be redirected): ``evalsha`` it is."""
        return None

    async def transaction(
        self, commands: Sequence[Sequence[Any]], *, key: Any, deadline: float = math.inf
    ) -> list[Any]:
        """``MultiplexedConnection.transaction`` on the master of ``key``'s slot (every key of
        the commands must share that slot)."""
        result: list[Any] = await self._routed(
            key, lambda link: link.transaction(commands, deadline=deadline), None, deadline
        )
        return result

    async def aclose(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.aclose()

    async def _routed(
        self,
        key: Any,
        call: Callable[[MultiplexedConnection], Awaitable[Any]],
        plain: Sequence[Sequence[Any]] | None,
        deadline: float,
    ) -> Any:
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for _ in range(self.MAX_REDIRECTS):
            link = await self._master_of(slot, deadline)
            try:
                return await call(link)
            except rexc.ConnectionError:
                self._stale = True
                raise
            except rexc.ResponseError as exc:
                code, _, rest = str(exc).partition(" ")
                if code == "MOVED":
                    self._stale = True
                    continue
                if code == "ASK" and plain is not None:
                    target = self._link(rest.split(" ")[-1])
                    replies = await target.pipeline([("ASKING",), *plain], deadline=deadline)
                    return replies[1:]
                if code == "ASK":
                    raise rexc.ResponseError(f"TRYAGAIN slot {slot} is migrating: {exc}") from exc
                raise
        raise rexc.ResponseError(f"TRYAGAIN slot {slot} kept moving ({self.MAX_REDIRECTS} times)")

    def _link(self, address: str) -> MultiplexedConnection:
        link = self._links.get(address)
        if link is None:
            host, _, port = address.rpartition(":")
            link = self._links[address] = MultiplexedConnection(
                host=host, port=int(port), **self._options
            )
        return link

    async def _master_of(self, slot: int, deadline: float) -> MultiplexedConnection:
        if self._stale or not self._slots:
            await self._refresh(deadline)
        return self._link(self._slots[slot])

    async def _refresh(self, deadline: float) -> None:
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        async with self._refreshing:
            if not self._stale and self._slots:
                return
            errors = []
            for address in dict.fromkeys([*self._links, *self._seeds]):
                try:
                    table = await self._link(address).execute("CLUSTER", "SLOTS", deadline=deadline)
                except (rexc.RedisError, OSError) as exc:
                    errors.append(f"{address}: {exc}")
                    continue
                slots = [""] * SLOT_COUNT
                for start, end, master, *_replicas in table:
                    host = master[0].decode() if isinstance(master[0], bytes) else master[0]
                    slots[start : end + 1] = [f"{host}:{master[1]}"] * (end - start + 1)
                if all(slots):
                    self._slots, self._stale = slots, False
                    return
                errors.append(f"{address}: not every slot is served yet")
            raise rexc.ConnectionError(
                "no cluster node gave a full slot map: " + "; ".join(errors[-3:])
            )


def open_multiplexed(
    url: str, client: Any, *, connect_timeout: float | None
) -> MultiplexedConnection | MultiplexedCluster | None:
    """The hot path's connection(s) beside redis-py's ``client`` for ``url``:
    a ``MultiplexedConnection`` to one server or to the master a Sentinel names (asked again
    at every connect), ``MultiplexedCluster`` for a cluster; None over TLS, for the
    embedded backend and for clients with a credential provider."""
    target = parse_url(url)
    if target.tls or target.kind == "embedded":
        return None
    if target.kind == "cluster":
        return MultiplexedCluster(
            target.nodes,
            username=target.username,
            password=target.password,
            connect_timeout=connect_timeout,
        )
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return None
    options = pool.connection_kwargs
    if options.get("credential_provider") is not None:
        return None
    resolve = None
    if target.kind == "sentinel":
        sentinel, service = pool.sentinel_manager, target.service

        async def resolve() -> tuple[str, int]:
            host, port = await sentinel.discover_master(service)
            return str(host), int(port)

    elif getattr(pool.connection_class, "__name__", "") not in _SUPPORTED:
        return None
    return MultiplexedConnection(
        host=options.get("host", "127.0.0.1"),
        port=int(options.get("port", 6379)),
        path=options.get("path"),
        db=int(options.get("db", 0) or 0),
        username=options.get("username"),
        password=options.get("password"),
        connect_timeout=connect_timeout,
        resolve=resolve,
    )


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
