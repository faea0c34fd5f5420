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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from ..core import doorbell as bell
from ..core import requests as rq
from ..core.queue import QueueCore
from .common import DoorbellBase, Doorbells, filled_pipeline, replica_node, slot_map

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # the hiredis extra: packs commands in C
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is optional
    _hiredis_pack = None

T = TypeVar("T")
Handler = Callable[[Any], Awaitable[Any]]


class AsyncDriver:
    """Answers core requests with a quorum and a read client (redis.asyncio Redis or
    RedisCluster).

    Args:
        quorum: the client of writes and claims. read: the client of cheap reads.
    """

    def __init__(self, quorum: Any, read: Any) -> None:
        self._clients = {rq.QUORUM: quorum, "read": read}
        self._bells = Doorbells(TaskDoorbell, quorum)
        self._node_clients: dict[str, Any] = {}  # Cluster primary name -> its own client
        # Commands that tasks send at the same moment on a plain redis.asyncio.Redis go out as
        # one pipelined write on one connection (auto-pipelining), per role.
        self._batchers = {role: _Batcher(client) for role, client in self._clients.items()
                          if type(client) is redis.asyncio.Redis and client.connection is None}
        self._handlers: dict[type, Handler] = {
            rq.Command: self._command, rq.Pipeline: self._pipeline, rq.Scan: self._scan,
            rq.RefreshSlots: self._refresh, rq.Sleep: lambda r: asyncio.sleep(r.seconds),
            rq.Ticket: self._ticket, rq.WaitBell: self._wait_bell,
        }

    async def run(self, op: rq.Op[T]) -> T:
        """Run one operation to its end and return its result (or raise its error)."""
        step = rq.Step(op)
        try:
            while step.pending:
                step.send(*(await self._outcome(step.request)))
        except rq.Cancelled:
            raise asyncio.CancelledError from None
        return step.result  # type: ignore[no-any-return]

    async def _outcome(self, request: Any) -> tuple[Any, BaseException | None]:
        if type(request) is rq.Command and request.replica_of is None:
            batcher = self._batchers.get(request.role)
            if batcher is not None:
                return await _settled(batcher.submit(request.args),
                                      state_change=request.role == rq.QUORUM)
        handler = self._handlers[type(request)]
        if type(request) in (rq.Command, rq.Pipeline) and request.role == rq.QUORUM:
            # A state change already sent finishes even if the caller is cancelled.
            task = asyncio.ensure_future(handler(request))
            try:
                return await asyncio.shield(task), None
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    return None, rq.Cancelled(await task)
                return None, rq.Cancelled()
            except Exception as exc:
                return None, exc
        try:
            return await handler(request), None
        except asyncio.CancelledError:
            return None, rq.Cancelled()
        except Exception as exc:  # handed to the operation, which decides
            return None, exc

    async def _command(self, request: rq.Command) -> Any:
        client = self._clients[request.role]
        if request.replica_of is not None:
            return await replica_node(client, request.replica_of).execute_command(*request.args)
        return await client.execute_command(*request.args)

    async def _pipeline(self, request: rq.Pipeline) -> list[Any]:
        client = self._clients[request.role]
        if request.owner_of is not None:
            client = self._node_client(client.get_node_from_key(request.owner_of))
        return list(await filled_pipeline(client, request.commands).execute())

    def _node_client(self, node: Any) -> Any:
        """A plain client of one Cluster node, so a pipeline and its WAIT reach that node."""
        client = self._node_clients.get(node.name)
        if client is None:
            pool = redis.asyncio.ConnectionPool(connection_class=node.connection_class,
                                                **node.connection_kwargs)
            client = self._node_clients[node.name] = redis.asyncio.Redis(connection_pool=pool)
        return client

    async def _scan(self, request: rq.Scan) -> list[tuple[Any, Any]]:
        client = self._clients[request.role]
        return [pair async for pair in client.hscan_iter(request.key, count=request.count)]

    async def _refresh(self, request: rq.RefreshSlots) -> None:
        manager = slot_map(self._clients[request.role])
        if manager is not None:  # a Cluster client
            with contextlib.suppress(RedisError, RedisClusterException):
                await manager.initialize()

    async def _ticket(self, request: rq.Ticket) -> rq.BellState:
        doorbell = await self.doorbell(request.bell)
        return rq.BellState(doorbell.rings.ticket(request.channels), doorbell.rings.listening,
                         doorbell.enabled)

    async def _wait_bell(self, request: rq.WaitBell) -> bool:
        doorbell = await self.doorbell(request.bell)
        return await doorbell.wait(request.channels, request.ticket, request.timeout_s)

    async def doorbell(self, core: QueueCore) -> TaskDoorbell:
        """The doorbell of ``core``'s queue; subscribed before the first claim, or a ring in
        between would be missed."""
        doorbell = self._bells.get(core)
        if doorbell.enabled:
            await doorbell.wait_until_listening(timeout_s=2.0)
        return doorbell

    async def close_doorbell(self, core: QueueCore) -> None:
        """Stop the doorbell of ``core``'s queue, waking its waiting pops."""
        doorbell = self._bells.pop(core)
        if doorbell is not None:
            await doorbell.close()

    async def aclose(self) -> None:
        """Close the per-node clients this driver opened (Cluster slot-owner writes)."""
        clients, self._node_clients = list(self._node_clients.values()), {}
        for client in clients:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()


def _packed(conn: Any, commands: list[Any]) -> Any:
    """The wire form of ``commands``: hiredis's C packer when it is installed and the client
    encodes text as strict UTF-8 (what hiredis does), else redis.asyncio's Python packer."""
    encoder = conn.encoder
    if _hiredis_pack is not None and encoder.encoding.lower() in ("utf-8", "utf8") \
            and encoder.encoding_errors == "strict":
        return b"".join([_hiredis_pack(tuple(args)) for args in commands])
    return conn.pack_commands(commands)


async def _settled(future: asyncio.Future[Any], *,
                   state_change: bool) -> tuple[Any, BaseException | None]:
    """The outcome of a batched command. A caller cancelled meanwhile gets Cancelled, with the
    reply of a state change that went out anyway (it may have leased messages)."""
    try:
        return await asyncio.shield(future), None
    except asyncio.CancelledError:
        if state_change:
            with contextlib.suppress(Exception):
                return None, rq.Cancelled(await future)
        return None, rq.Cancelled()
    except Exception as exc:  # handed to the operation, which decides
        return None, exc


class _Batcher:
    """Auto-pipelining for one client: what is submitted while a batch is in flight goes out
    as the next batch, one write and one read pass each, on one connection of the pool. A
    failed batch is retried by the connection's Retry, as redis-py retries a pipeline."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._pending: list[tuple[Any, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def _packable(self, conn: Any,
                  batch: list[tuple[Any, asyncio.Future[Any]]]) -> list[tuple[Any, Any]]:
        """The commands of ``batch`` that encode; the others' callers get the error."""
        kept = []
        for item in batch:
            try:
                _packed(conn, [item[0]])
            except Exception as exc:
                self._fail([item], exc)
            else:
                kept.append(item)
        return kept

    def submit(self, args: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        # A caller cancelled meanwhile may never look: mark an error as seen, so asyncio does
        # not log "exception was never retrieved" (the operation already got Cancelled).
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._pending.append((args, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        pool = self._client.connection_pool
        try:
            conn = await pool.get_connection()
        except BaseException as exc:
            self._fail(self._pending, exc)
            self._pending, self._flusher = [], None
            raise
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                await self._exchange(conn, batch)
        finally:
            self._flusher = None
            await pool.release(conn)

    async def _exchange(self, conn: Any, batch: list[tuple[Any, asyncio.Future[Any]]]) -> None:
        try:
            packed = _packed(conn, [args for args, _ in batch])
        except Exception:  # a command that cannot be encoded fails alone; its caller must
            batch = self._packable(conn, batch)  # not wait forever, nor fail the others
            if not batch:
                return
            packed = _packed(conn, [args for args, _ in batch])
        replies: list[Any] = []

        async def once() -> None:
            replies.clear()
            await conn.send_packed_command(packed, check_health=False)
            for _ in batch:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # this command's error; the rest still reply
                    replies.append(exc)

        try:
            await conn.retry.call_with_retry(once, lambda _error: conn.disconnect())
        except Exception as exc:
            self._fail(batch, exc)
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)

    @staticmethod
    def _fail(batch: list[tuple[Any, asyncio.Future[Any]]], exc: BaseException) -> None:
        error = exc if isinstance(exc, Exception) else RedisConnectionError(str(exc))
        for _, future in batch:
            if not future.done():
                future.set_exception(error)


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
        return await self._wait_for(lambda: self.rings.listening, timeout_s)

    async def wait(self, channels: Sequence[str], ticket: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a ring on ``channels`` after ``ticket``; rung?"""
        return await self._wait_for(lambda: self.rings.ticket(channels) != ticket, timeout_s)

    async def _wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(
                    lambda: predicate() or self._closed.is_set()), timeout_s)
            except TimeoutError:
                return False
        return True

    async def close(self) -> None:
        """Stop the listener task and wait for it to end."""
        self._closed.set()
        async with self._changed:
            self._changed.notify_all()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)

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
        self.rings.listening = request.value
        async with self._changed:
            self._changed.notify_all()

    async def _pause(self, request: bell.Pause) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), request.seconds)
