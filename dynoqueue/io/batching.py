"""The asyncio driver's transport tuning: auto-pipelining. Commands that tasks send at the
same moment on a plain ``redis.asyncio.Redis`` go out as one pipelined write on one connection
(:class:`Batcher`), joined where they may be (:func:`joined`), each caller getting its own
reply or error; a cancelled caller can still wait for a state change that went out."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import requests as rq
from ..core.deadline import CURRENT, RETRY_TIMEOUTS, Deadline, DeadlinePassed
from .common import hiredis_packer


def wire_form(conn: Any, commands: list[Any]) -> Any:
    """The wire form of ``commands``: hiredis's C packer when it is installed and the client
    encodes text as strict UTF-8 (what hiredis does), else redis.asyncio's Python packer (whose
    list of chunks is joined: the writer takes one bytes object)."""
    pack = hiredis_packer(conn)
    if pack is not None:
        return b"".join([pack(tuple(args)) for args in commands])
    return b"".join(conn.pack_commands(commands))


async def wait_failed(call: BatchedCall, exc: BaseException) -> BaseException:
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


async def write_batch(conn: Any, packed: bytes) -> None:
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


class BatchedCall:
    """One command submitted to a :class:`Batcher`: what its caller awaits (``future``) and
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
        resolve(self.future, reply)
        if self.late is not None:  # the caller was cancelled and waits for it (late_reply)
            resolve(self.late, reply)

    async def late_reply(self) -> Any:
        """The reply, awaited after the caller was cancelled (None if it failed)."""
        if not self.settled:
            self.late = asyncio.get_running_loop().create_future()
            with contextlib.suppress(Exception):
                return await self.late
            return None
        return None if isinstance(self.reply, BaseException) else self.reply


def resolve(future: asyncio.Future[Any], reply: Any) -> None:
    """Set ``future`` to ``reply`` (an exception: raised to its awaiter), unless it is done
    (cancelled, or ended by its deadline)."""
    if not future.done():
        if isinstance(reply, BaseException):
            future.set_exception(reply)
        else:
            future.set_result(reply)


class Batcher:
    """Auto-pipelining for one client: what is submitted while a batch is in flight goes out
    as the next batch, one write and one read pass each, on one connection of the pool.
    Commands of a batch that may merge (a :class:`~dynoqueue.core.requests.Merge`, e.g.
    concurrent pushes to one queue) go out as one command whose reply is split among them. A
    failed batch is retried by the connection's Retry, as redis-py retries a pipeline.

    Callers await their :class:`BatchedCall`'s future directly; one timer (not one per call) ends
    the wait of those whose deadline passed with DeadlinePassed (their command, if sent,
    still finishes; its reply is dropped)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._pending: list[BatchedCall] = []
        self._inflight: list[BatchedCall] = []
        self._flusher: asyncio.Task[None] | None = None
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = 0.0

    def submit(self, command: rq.Command, deadline: Deadline) -> BatchedCall:
        """Queue a command for the next batch; await the returned call's ``future``."""
        loop = asyncio.get_running_loop()
        call = BatchedCall(command, deadline, loop.create_future())
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

    def _packable(self, conn: Any, batch: list[BatchedCall]) -> list[BatchedCall]:
        """The commands of ``batch`` that encode; the others' callers get the error."""
        kept = []
        for call in batch:
            try:
                wire_form(conn, [call.command.args])
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

    async def _exchange(self, conn: Any, batch: list[BatchedCall]) -> None:
        try:
            sends, latest, idempotent = joined(batch)
            packed = wire_form(conn, [send.args for send in sends])
        except Exception:  # a command that cannot be encoded fails alone; its caller must
            batch = self._packable(conn, batch)  # not wait forever, nor fail the others
            if not batch:
                return
            sends, latest, idempotent = joined(batch)
            packed = wire_form(conn, [send.args for send in sends])
        replies: list[Any] = []

        async def once() -> None:
            replies.clear()
            await write_batch(conn, packed)
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
    def _fail(batch: list[BatchedCall], exc: BaseException) -> None:
        error = exc if isinstance(exc, Exception) else RedisConnectionError(str(exc))
        for call in batch:
            call.settle(error)


class JoinedSend:
    """One command of a batch on the wire: a submitted command, or several merged ones (in
    the order their items were joined, with their item counts)."""

    __slots__ = ("args", "calls", "items", "merge", "total")

    def __init__(self, call: BatchedCall, items: int) -> None:
        self.args: Any = call.command.args
        self.merge = call.command.merge
        self.calls = [call]
        self.items = [items]
        self.total = items

    def join(self, call: BatchedCall, items: int) -> None:
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


def joined(batch: list[BatchedCall]) -> tuple[list[JoinedSend], Deadline, bool]:
    """The commands to send for ``batch``: those that may merge, with equal heads, joined (up
    to their Merge's limit of items each); the rest as they are, in order. With them, how the
    batch is retried (one pass over its calls for all three): until the latest of their
    deadlines, and after a read timeout only if every command is idempotent."""
    sends: list[JoinedSend] = []
    open_: dict[tuple[Any, ...], JoinedSend] = {}
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
            sends.append(JoinedSend(call, 0))
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
            send = open_[key] = JoinedSend(call, items)
            sends.append(send)
    return sends, latest, idempotent
