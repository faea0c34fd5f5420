"""The asyncio driver: runs core operations on redis.asyncio clients without blocking the loop.

:class:`AsyncDriver` answers the requests of :mod:`dynoqueue.core.requests`;
:class:`TaskDoorbell` runs the doorbell listener of :mod:`dynoqueue.core.doorbell` as a task.

Cancellation: a write or claim already sent is allowed to finish (shielded), and its reply is
thrown into the operation as :class:`~dynoqueue.core.requests.Cancelled`, so a cancelled
waiting pop puts back what it had leased instead of stranding it until the lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import doorbell as bell
from ..core import requests as rq
from ..core.deadline import CURRENT, RETRY_TIMEOUTS, Deadline, DeadlinePassed, seconds_left
from ..core.queue import QueueCore
from .common import (
    DoorbellBase,
    Doorbells,
    answered_here,
    filled_pipeline,
    hiredis_packer,
    replica_node,
    slot_map,
    typed,
)

T = TypeVar("T")
Handler = Callable[[Any], Awaitable[Any]]


class AsyncDriver:
    """Answers core requests with a quorum and a read client (redis.asyncio Redis or
    RedisCluster).

    Every operation runs under one deadline, ``call_timeout_s`` (a waiting pop: its wait plus
    that), as in :class:`~dynoqueue.io.sync.SyncDriver`; here a reply not in by then is not
    awaited further (a write already sent still finishes in the background, its outcome
    unknown to the caller).

    Args:
        quorum: the client of writes and claims. read: the client of cheap reads.
        call_timeout_s: the deadline of one operation, seconds.
    """

    def __init__(self, quorum: Any, read: Any, call_timeout_s: float = 10.0) -> None:
        self.call_timeout_s = call_timeout_s
        self._clients = {rq.QUORUM: quorum, "read": read}
        self._bells = Doorbells(TaskDoorbell, quorum)
        self._node_clients: dict[str, Any] = {}  # Cluster primary name -> its own client
        # redis.asyncio fails a command at once (MaxConnectionsError) when its pool (or a
        # Cluster node) has max_connections in use (redis-py 8: 100 by default): a command
        # that takes a connection of its own waits for one of fewer places instead (many
        # waiting pops wake and claim together). A quarter stays free for what holds a
        # connection outside them: doorbell subscriptions, the batchers. Keyed by client:
        # the roles may share one.
        self._places = {id(client): asyncio.Semaphore(_places(client))
                        for client in self._clients.values()}
        # Commands that tasks send at the same moment on a plain redis.asyncio.Redis go out as
        # one pipelined write on one connection (auto-pipelining), per role.
        self._batchers = {role: _Batcher(client) for role, client in self._clients.items()
                          if type(client) is redis.asyncio.Redis and client.connection is None}
        self._handlers: dict[type, Handler] = {
            rq.Command: self._command, rq.Pipeline: self._pipeline, rq.Scan: self._scan,
            rq.RefreshSlots: self._refresh,
            rq.Sleep: lambda r: asyncio.sleep(seconds_left(r.seconds)),
            rq.Ticket: self._ticket, rq.WaitBell: self._wait_bell,
        }

    async def run(self, op: rq.Op[T]) -> T:
        """Run one operation to its end and return its result (or raise its error)."""
        deadline = Deadline(self.call_timeout_s)
        token = CURRENT.set(deadline)
        try:
            return await self._steps(rq.Step(op), deadline)
        finally:
            CURRENT.reset(token)

    async def run_call(self, command: rq.Command, done: Callable[[Any], T],
                       op: Callable[[], rq.Op[T]]) -> T:
        """``done(reply)`` of ``command``, sent at once under the call's deadline (batched
        with concurrent calls, as :meth:`run` sends it): an operation that is one command and
        its decoding, run without the operation's layers (see QueueCore.push_call). If
        sending it fails (or the caller is cancelled meanwhile), ``op()``, whose first request
        is that command, gets the error there and runs on (its result, or its error, is the
        call's), as :meth:`dynoqueue.io.sync.SyncDriver.run_call` does."""
        deadline = Deadline(self.call_timeout_s)
        error: BaseException | None = None
        batcher = self._batchers.get(command.role) if command.replica_of is None else None
        if batcher is not None:
            # Awaited here, not through _outcome (a coroutine frame less per call); the batch
            # sets its own deadline where the connection's retries read it (_exchange).
            call = batcher.submit(command, deadline)
            try:
                reply = await call.future
            except BaseException as exc:
                error = await _wait_failed(call, exc)
            else:
                return done(reply)
        token = CURRENT.set(deadline)
        try:
            if batcher is None:
                reply, error = await self._outcome(command, deadline)
                if error is None:
                    return done(reply)
            return await self._steps(rq.Step(op()), deadline, error)
        finally:
            CURRENT.reset(token)

    async def _steps(self, step: rq.Step[T], deadline: Deadline,
                     error: BaseException | None = None) -> T:
        """Advance ``step`` to its end, first throwing ``error`` in at its request if given;
        Cancelled out of the operation is the caller's CancelledError again."""
        try:
            if error is not None and step.pending:
                step.send(None, typed(error) if isinstance(error, Exception) else error)
            while step.pending:
                if not answered_here(step, deadline, self.call_timeout_s):
                    reply, error = await self._outcome(step.request, deadline)
                    step.send(reply, typed(error) if isinstance(error, Exception) else error)
        except rq.Cancelled:
            raise asyncio.CancelledError from None
        return step.result  # type: ignore[no-any-return]

    async def _outcome(self, request: Any,
                       deadline: Deadline) -> tuple[Any, BaseException | None]:
        if type(request) is rq.Command and request.replica_of is None:
            batcher = self._batchers.get(request.role)
            if batcher is not None:
                call = batcher.submit(request, deadline)
                try:
                    return await call.future, None
                except BaseException as exc:
                    return None, await _wait_failed(call, exc)
        handler = self._handlers[type(request)]
        if type(request) in (rq.Command, rq.Pipeline) and request.role == rq.QUORUM:
            # A state change already sent finishes even if the caller is cancelled.
            task = asyncio.ensure_future(self._once(handler, request))
            # An error nobody awaits any more (past the deadline) is marked seen: no warning.
            task.add_done_callback(lambda f: f.cancelled() or f.exception())
            return await _settled(task, deadline, state_change=True)
        limit = asyncio.timeout(deadline.left())
        try:
            async with limit:
                return await self._once(handler, request), None
        except asyncio.CancelledError:
            return None, rq.Cancelled()
        except Exception as exc:  # handed to the operation, which decides
            if isinstance(exc, TimeoutError) and limit.expired():
                return None, DeadlinePassed("no reply")
            return None, exc

    @staticmethod
    async def _once(handler: Handler, request: Any) -> Any:
        """``handler(request)``; a claim's read timeout is not retried (see RETRY_TIMEOUTS)."""
        if type(request) is rq.Command and not request.idempotent:
            token = RETRY_TIMEOUTS.set(False)
            try:
                return await handler(request)
            finally:
                RETRY_TIMEOUTS.reset(token)
        return await handler(request)

    async def _command(self, request: rq.Command) -> Any:
        client = self._clients[request.role]
        if request.replica_of is not None:
            return await replica_node(client, request.replica_of).execute_command(*request.args)
        async with self._place(client):
            return await client.execute_command(*request.args)

    def _place(self, client: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """One of ``client``'s places (see __init__)."""
        return self._places[id(client)]

    async def _pipeline(self, request: rq.Pipeline) -> list[Any]:
        client = self._clients[request.role]
        if request.owner_of is not None:
            client = self._node_client(client.get_node_from_key(request.owner_of))
        async with self._place(client):
            return list(await filled_pipeline(client, request.commands).execute())

    def _node_client(self, node: Any) -> Any:
        """A plain client of one Cluster node, so a pipeline and its WAIT reach that node."""
        client = self._node_clients.get(node.name)
        if client is None:
            pool = redis.asyncio.ConnectionPool(connection_class=node.connection_class,
                                                **node.connection_kwargs)
            client = self._node_clients[node.name] = redis.asyncio.Redis(connection_pool=pool)
            self._places[id(client)] = asyncio.Semaphore(_places(client))
        return client

    async def _scan(self, request: rq.Scan) -> list[tuple[Any, Any]]:
        client = self._clients[request.role]
        async with self._place(client):
            return [pair async for pair in client.hscan_iter(request.key, count=request.count)]

    async def _refresh(self, request: rq.RefreshSlots) -> None:
        client = self._clients[request.role]
        manager = slot_map(client)
        if manager is not None:  # a Cluster client
            with contextlib.suppress(RedisError, RedisClusterException):
                if getattr(client, "_initialize", False):
                    # Never used yet: initialise the whole client. Reading only its slot map
                    # would leave its command parser unset, and redis.asyncio (8.x) routes the
                    # next keyed command through that parser before initialising it.
                    await client.initialize()
                else:
                    await manager.initialize()

    async def _ticket(self, request: rq.Ticket) -> rq.BellState:
        doorbell = await self.doorbell(request.bell)
        return rq.BellState(doorbell.rings.ticket(request.channels), doorbell.rings.listening,
                            doorbell.enabled and not doorbell.rings.denied)

    async def _wait_bell(self, request: rq.WaitBell) -> bool:
        doorbell = await self.doorbell(request.bell)
        return await doorbell.wait(request.channels, request.ticket, request.timeout_s)

    async def doorbell(self, core: QueueCore) -> TaskDoorbell:
        """The doorbell of ``core``'s queue; subscribed before the first claim, or a ring in
        between would be missed (waiting at most 2 s, or half the call's time left)."""
        doorbell = self._bells.get(core)
        if doorbell.enabled:
            await doorbell.wait_until_listening(timeout_s=min(2.0, seconds_left(4.0) / 2))
        return doorbell

    async def close_doorbell(self, core: QueueCore, timeout_s: float = 5.0) -> None:
        """Stop the doorbell of ``core``'s queue, waking its waiting pops; wait up to
        ``timeout_s`` seconds for its listener to end."""
        doorbell = self._bells.pop(core)
        if doorbell is not None:
            await doorbell.close(timeout_s)

    async def aclose(self) -> None:
        """Close the per-node clients this driver opened (Cluster slot-owner writes) and stop
        the batchers' deadline timers."""
        for batcher in self._batchers.values():
            batcher.close()
        clients, self._node_clients = list(self._node_clients.values()), {}
        for client in clients:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()


def _places(client: Any) -> int:
    """How many commands may hold a connection of ``client`` at once: three quarters of its
    max_connections (per node for a Cluster client), at least one."""
    manager = slot_map(client)
    limit = (manager.connection_kwargs.get("max_connections") if manager is not None
             else getattr(getattr(client, "connection_pool", None), "max_connections", None))
    if not isinstance(limit, int) or limit <= 0 or limit >= 2**31 - 1:
        limit = 100
    return max(1, limit * 3 // 4)


def _packed(conn: Any, commands: list[Any]) -> Any:
    """The wire form of ``commands``: hiredis's C packer when it is installed and the client
    encodes text as strict UTF-8 (what hiredis does), else redis.asyncio's Python packer (whose
    list of chunks is joined: the writer takes one bytes object)."""
    pack = hiredis_packer(conn)
    if pack is not None:
        return b"".join([pack(tuple(args)) for args in commands])
    return b"".join(conn.pack_commands(commands))


async def _wait_failed(call: _Call, exc: BaseException) -> BaseException:
    """What to throw into the operation whose wait for a batched ``call`` raised ``exc``:
    the error itself (the operation decides), or Cancelled for a cancelled caller, with the
    reply of a state change that went out anyway (it may have leased messages: the operation
    can undo it). Anything else (KeyboardInterrupt, ...) is raised again."""
    if isinstance(exc, asyncio.CancelledError):
        if call.command.role != rq.QUORUM:
            return rq.Cancelled()
        return rq.Cancelled(await call.late_reply())
    if isinstance(exc, Exception):
        return exc
    raise exc


async def _settled(future: asyncio.Future[Any], deadline: Deadline, *,
                   state_change: bool) -> tuple[Any, BaseException | None]:
    """The outcome of a command sent on its own (``future`` is not cancelled here): within
    the deadline, else DeadlinePassed. A caller cancelled meanwhile gets Cancelled, with the
    reply of a state change that went out anyway (it may have leased messages)."""
    try:
        done, _ = await asyncio.wait((future,), timeout=max(0.0, deadline.left()))
    except asyncio.CancelledError:
        if state_change:
            with contextlib.suppress(Exception):
                return None, rq.Cancelled(await future)
        return None, rq.Cancelled()
    if not done:
        return None, DeadlinePassed("no reply")
    if future.cancelled():
        return None, rq.Cancelled()
    error = future.exception()
    if error is None:
        return future.result(), None
    return None, error


async def _send(conn: Any, packed: bytes) -> None:
    """Write ``packed`` on ``conn``. redis.asyncio wraps each write in ``asyncio.wait_for``
    when the connection has a socket timeout (its default: 5 s), a task and three loop turns
    per write; a write to a connected socket whose buffer takes it returns at once, so only
    a write that has to wait for the socket (or a connection to open) goes that way."""
    writer = getattr(conn, "_writer", None)  # redis.asyncio's StreamWriter, once connected
    if writer is not None and conn.is_connected and not writer.transport.is_closing():
        writer.write(packed)
        if writer.transport.get_write_buffer_size() == 0:  # all on the wire
            return
        try:  # the socket is full: wait for it as redis.asyncio would
            async with asyncio.timeout(conn.socket_timeout):
                await writer.drain()
        except (TimeoutError, OSError) as exc:
            await conn.disconnect(nowait=True)  # a partial write: the connection is spent
            if isinstance(exc, TimeoutError):
                raise RedisTimeoutError("Timeout writing to socket") from None
            raise RedisConnectionError(f"Error writing to socket: {exc}") from exc
        return
    await conn.send_packed_command(packed, check_health=False)


class _Call:
    """One command submitted to a :class:`_Batcher`: what its caller awaits (``future``) and
    what it got (``reply``, an exception for an error, once ``settled``). A caller cancelled
    meanwhile cancels ``future``; it may still wait for the reply through :meth:`late_reply`
    (a state change that went out anyway may have leased messages)."""

    __slots__ = ("command", "deadline", "future", "late", "reply", "settled")

    def __init__(self, command: rq.Command, deadline: Deadline,
                 future: asyncio.Future[Any]) -> None:
        self.command = command
        self.deadline = deadline
        self.future = future
        self.reply: Any = None
        self.settled = False
        self.late: asyncio.Future[Any] | None = None

    def settle(self, reply: Any) -> None:
        """Hand the caller its reply (an exception: raised to it)."""
        self.reply = reply
        self.settled = True
        _resolve(self.future, reply)
        if self.late is not None:  # the caller was cancelled and waits for it (late_reply)
            _resolve(self.late, reply)

    async def late_reply(self) -> Any:
        """The reply, awaited after the caller was cancelled (None if it failed)."""
        if not self.settled:
            self.late = asyncio.get_running_loop().create_future()
            with contextlib.suppress(Exception):
                return await self.late
            return None
        return None if isinstance(self.reply, BaseException) else self.reply


def _resolve(future: asyncio.Future[Any], reply: Any) -> None:
    """Set ``future`` to ``reply`` (an exception: raised to its awaiter), unless it is done
    (cancelled, or ended by its deadline)."""
    if not future.done():
        if isinstance(reply, BaseException):
            future.set_exception(reply)
        else:
            future.set_result(reply)


class _Batcher:
    """Auto-pipelining for one client: what is submitted while a batch is in flight goes out
    as the next batch, one write and one read pass each, on one connection of the pool.
    Commands of a batch that may merge (a :class:`~dynoqueue.core.requests.Merge`, e.g.
    concurrent pushes to one queue) go out as one command whose reply is split among them. A
    failed batch is retried by the connection's Retry, as redis-py retries a pipeline.

    Callers await their :class:`_Call`'s future directly; one timer (not one per call) ends
    the wait of those whose deadline passed with DeadlinePassed (their command, if sent,
    still finishes; its reply is dropped)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._pending: list[_Call] = []
        self._inflight: list[_Call] = []
        self._flusher: asyncio.Task[None] | None = None
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = 0.0

    def submit(self, command: rq.Command, deadline: Deadline) -> _Call:
        """Queue a command for the next batch; await the returned call's ``future``."""
        loop = asyncio.get_running_loop()
        call = _Call(command, deadline, loop.create_future())
        self._pending.append(call)
        if self._watch is None or deadline.at < self._watch_at:
            self._arm(loop, deadline.at)
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return call

    def close(self) -> None:
        """Stop the deadline timer (the factory closes)."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._watch_at = at
        self._watch = loop.call_later(max(0.0, at - time.monotonic()), self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer: end the waits past their deadline; wait for the next deadline."""
        self._watch = None
        nearest = None
        for call in (*self._inflight, *self._pending):
            if call.future.done():
                continue
            if call.deadline.left() <= 0:
                call.future.set_exception(DeadlinePassed("no reply"))
            elif nearest is None or call.deadline.at < nearest:
                nearest = call.deadline.at
        if nearest is not None:
            self._arm(loop, nearest)

    def _packable(self, conn: Any, batch: list[_Call]) -> list[_Call]:
        """The commands of ``batch`` that encode; the others' callers get the error."""
        kept = []
        for call in batch:
            try:
                _packed(conn, [call.command.args])
            except Exception as exc:
                self._fail([call], exc)
            else:
                kept.append(call)
        return kept

    async def _flush(self) -> None:
        pool = self._client.connection_pool
        try:
            conn = await pool.get_connection()
        except BaseException as exc:
            self._fail(self._pending, exc)
            self._pending, self._flusher = [], None
            if not isinstance(exc, Exception):
                raise
            return  # the callers have the error; nobody awaits this task
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                self._inflight = batch
                try:
                    await self._exchange(conn, batch)
                finally:
                    self._inflight = []
                    batch = []  # its commands' args go now, not after the next batch is made
                if not self._pending:
                    # The callers just settled run before this task does again, and those that
                    # call again at once (producers) make the next batch: it goes out on this
                    # connection, without a pool checkout and a new flusher task per batch.
                    await asyncio.sleep(0)
        finally:
            self._flusher = None
            await pool.release(conn)

    async def _exchange(self, conn: Any, batch: list[_Call]) -> None:
        try:
            sends, latest, idempotent = _joined(batch)
            packed = _packed(conn, [send.args for send in sends])
        except Exception:  # a command that cannot be encoded fails alone; its caller must
            batch = self._packable(conn, batch)  # not wait forever, nor fail the others
            if not batch:
                return
            sends, latest, idempotent = _joined(batch)
            packed = _packed(conn, [send.args for send in sends])
        replies: list[Any] = []

        async def once() -> None:
            replies.clear()
            await _send(conn, packed)
            for _ in sends:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # this command's error; the rest still reply
                    replies.append(exc)

        # The batch retries until its latest caller's deadline, and not after a read timeout
        # if any command of it is a claim.
        CURRENT.set(latest)
        RETRY_TIMEOUTS.set(idempotent)
        try:
            await conn.retry.call_with_retry(once, lambda _error: conn.disconnect())
        except Exception as exc:
            # Replies may be left unread (an error redis-py did not expect): the connection
            # goes back to the pool only as a new one, never out of step with its replies.
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)
            self._fail(batch, exc)
            return
        for send, reply in zip(sends, replies, strict=True):
            send.settle(reply)

    @staticmethod
    def _fail(batch: list[_Call], exc: BaseException) -> None:
        error = exc if isinstance(exc, Exception) else RedisConnectionError(str(exc))
        for call in batch:
            call.settle(error)


class _Send:
    """One command of a batch on the wire: a submitted command, or several merged ones (in
    the order their items were joined, with their item counts)."""

    __slots__ = ("args", "calls", "items", "merge", "total")

    def __init__(self, call: _Call, items: int) -> None:
        self.args: Any = call.command.args
        self.merge = call.command.merge
        self.calls = [call]
        self.items = [items]
        self.total = items

    def join(self, call: _Call, items: int) -> None:
        if len(self.calls) == 1:
            self.args = list(self.args)
        self.args += call.command.args[self.merge.head:]  # type: ignore[union-attr]
        self.calls.append(call)
        self.items.append(items)
        self.total += items

    def settle(self, reply: Any) -> None:
        """Hand each call its reply (its own part of a merged one), or the error."""
        if len(self.calls) == 1 or isinstance(reply, Exception):
            for call in self.calls:
                call.settle(reply)
            return
        if type(reply) is not list:
            reply = list(reply)
        shared = self.merge.shared  # type: ignore[union-attr]
        head, at = reply[:shared], shared
        for call, n in zip(self.calls, self.items, strict=True):
            call.settle(head + reply[at:at + n])
            at += n


def _joined(batch: list[_Call]) -> tuple[list[_Send], Deadline, bool]:
    """The commands to send for ``batch``: those that may merge, with equal heads, joined (up
    to their Merge's limit of items each); the rest as they are, in order. With them, how the
    batch is retried (one pass over its calls for all three): until the latest of their
    deadlines, and after a read timeout only if every command is idempotent."""
    sends: list[_Send] = []
    open_: dict[tuple[Any, ...], _Send] = {}
    latest = batch[0].deadline
    idempotent = True
    for call in batch:
        command = call.command
        if call.deadline.at > latest.at:
            latest = call.deadline
        if not command.idempotent:
            idempotent = False
        merge = command.merge
        if merge is None:
            sends.append(_Send(call, 0))
            continue
        # Equal heads: the same kept head object (the batch's calls hold it, so its id is
        # unique meanwhile) and equal args after it; else compare the args themselves.
        args, head = command.args, command.head
        key = ((id(head), tuple(args[len(head):merge.head])) if head is not None
               else tuple(args[:merge.head]))
        items = (len(args) - merge.head) // merge.per_item
        send = open_.get(key)
        if send is not None and send.total + items <= merge.limit:
            send.join(call, items)
        else:
            send = open_[key] = _Send(call, items)
            sends.append(send)
    return sends, latest, idempotent


class TaskDoorbell(DoorbellBase):
    """A pub/sub listener task over a fixed set of channels (see :class:`ThreadDoorbell` in
    :mod:`dynoqueue.io.sync` for the contract); created inside the running event loop."""

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        super().__init__(conn, channels, enabled)
        self._changed = asyncio.Condition()
        self._closed = asyncio.Event()
        self._handlers: dict[type, Handler] = {
            bell.Subscribe: self._subscribe, bell.NextMessage: self._next,
            bell.Unsubscribe: self._unsubscribe, bell.Rang: self._rang,
            bell.Listening: self._listening, bell.Pause: self._pause,
        }
        self._task = (asyncio.get_running_loop().create_task(self._run(channels),
                                                             name="dynoqueue-doorbell")
                      if enabled else None)

    async def wait_until_listening(self, timeout_s: float) -> bool:
        """Wait until subscribed (or ``timeout_s`` seconds pass); return whether it is."""
        return await self._wait_for(lambda: self.rings.listening or self.rings.denied,
                                    timeout_s)

    async def wait(self, channels: Sequence[str], ticket: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a ring on ``channels`` after ``ticket``; rung?"""
        return await self._wait_for(lambda: self.rings.ticket(channels) != ticket, timeout_s)

    async def _wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        if predicate() or self._closed.is_set():  # already: no lock, no timer (every claim)
            return True
        async with self._changed:
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: no task per wait
                    await self._changed.wait_for(lambda: predicate() or self._closed.is_set())
            except TimeoutError:
                return False
        return True

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop the listener task; wait up to ``timeout_s`` seconds for it to end, then
        cancel it (it may be stuck connecting to a frozen server)."""
        self._closed.set()
        async with self._changed:
            self._changed.notify_all()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, timeout_s)

    async def _run(self, channels: Sequence[str]) -> None:
        step = rq.Step(bell.listen(channels, self._closed.is_set))
        while step.pending:
            try:
                step.send(await self._handlers[type(step.request)](step.request))
            except Exception as exc:  # handed to the listener, which logs and retries
                step.send(None, exc)

    async def _subscribe(self, request: bell.Subscribe) -> Any:
        # The asyncio RedisCluster reads its slot map at first use; pub/sub needs it first.
        await self._conn.initialize()
        pubsub = self._conn.pubsub()
        try:
            await pubsub.subscribe(*request.channels)
        except BaseException:
            await self._unsubscribe(bell.Unsubscribe(pubsub))
            raise
        return pubsub

    async def _next(self, request: bell.NextMessage) -> Any:
        return await request.handle.get_message(timeout=request.timeout_s)

    async def _unsubscribe(self, request: bell.Unsubscribe) -> None:
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            await request.handle.aclose()

    async def _rang(self, request: bell.Rang) -> None:
        self.rings.bump(request.channel)
        async with self._changed:
            self._changed.notify_all()

    async def _listening(self, request: bell.Listening) -> None:
        if request.denied is not None:
            bell.report_denied(self._conn, self.rings.channels, request.denied)
        self.rings.listening = request.value
        self.rings.denied = request.denied is not None
        async with self._changed:
            self._changed.notify_all()

    async def _pause(self, request: bell.Pause) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), request.seconds)
