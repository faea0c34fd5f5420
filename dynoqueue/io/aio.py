"""The asyncio driver: runs core operations on redis.asyncio clients without blocking the loop.

:class:`AsyncDriver` answers the requests of :mod:`dynoqueue.core.requests`; commands sent at
the same moment are pipelined (:mod:`dynoqueue.io.batching`: the transport tuning), and
waiting pops await a :class:`~dynoqueue.io.task_doorbell.TaskDoorbell`.

Cancellation: a write or claim already sent is allowed to finish (shielded), and its reply is
thrown into the operation as :class:`~dynoqueue.core.requests.Cancelled`, so a cancelled
waiting pop puts back what it had leased instead of stranding it until the lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio
from redis.exceptions import RedisClusterException, RedisError

from ..core import requests as rq
from ..core.deadline import CURRENT, RETRY_TIMEOUTS, Deadline, DeadlinePassed, seconds_left
from ..core.queue import QueueCore
from .batching import Batcher, wait_failed
from .cluster import REDIRECTED, REROUTED, SCRIPT_CALLS, endpoint_of, key_of, replica_node, slot_map
from .common import answered_here, filled_pipeline, outcomes, typed
from .doorbells import Doorbells
from .task_doorbell import TaskDoorbell

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
        self._batchers = {role: Batcher(client) for role, client in self._clients.items()
                          if type(client) is redis.asyncio.Redis and client.connection is None}
        # On a Cluster the same per primary: a script call goes out through the batcher of the
        # node that owns its key (redis.asyncio's Cluster client checks the slot of every key
        # and encodes every argument in Python).
        self._clustered = {role for role, client in self._clients.items()
                           if slot_map(client) is not None}
        self._node_batchers: dict[str, Batcher] = {}
        self._handlers: dict[type, Handler] = {
            rq.Command: self._command, rq.Pipeline: self._pipeline, rq.Batch: self._batch,
            rq.Scan: self._scan,
            rq.RefreshSlots: self._refresh,
            rq.Sleep: lambda r: asyncio.sleep(seconds_left(r.seconds)),
            rq.Ticket: self._ticket, rq.WaitBell: self._wait_bell,
        }

    async def run(self, op: rq.Run[T]) -> T:
        """Run one operation to its end and return its result (or raise its error). A
        :class:`~dynoqueue.core.requests.CommandOp` is its command, sent at once (batched with
        concurrent calls) and its decoding; if sending fails (or the caller is cancelled
        meanwhile), the call's operation gets the error at that request and runs on, as
        :meth:`dynoqueue.io.sync.SyncDriver.run` does."""
        deadline = Deadline(self.call_timeout_s)
        if type(op) is rq.CommandOp:
            call: rq.CommandOp[T] = op
            command = call.command
            batcher = (self._batchers.get(command.role)
                       if type(command) is rq.Command and command.replica_of is None else None)
            if batcher is None:
                return await self._call(call, deadline)
            # The producer's usual call, awaited here: no coroutine frame of its own (each
            # costs every call). The batch sets its own deadline where the connection's
            # retries read it (_exchange).
            sent = batcher.submit(command, deadline)  # type: ignore[arg-type]
            try:
                reply = await sent.future
            except BaseException as exc:
                error = await wait_failed(sent, exc)
                token = CURRENT.set(deadline)
                try:
                    return await self._steps(rq.Step(call.op()), deadline, error)
                finally:
                    CURRENT.reset(token)
            return call.done(reply)
        token = CURRENT.set(deadline)
        try:
            return await self._steps(rq.Step(op), deadline)  # type: ignore[arg-type]
        finally:
            CURRENT.reset(token)

    async def _call(self, call: rq.CommandOp[T], deadline: Deadline) -> T:
        """:meth:`run` of a CommandOp whose command has no plain client's batcher: a Cluster
        node's batcher, or sent on its own (a Batch, or a Cluster client not yet mapped)."""
        token = CURRENT.set(deadline)
        try:
            reply, error = await self._outcome(call.command, deadline)
            if error is None:
                try:
                    return call.done(reply)
                except rq.Replay:
                    step = rq.Step(call.op())
                    step.send(reply)
                    return await self._steps(step, deadline)
            return await self._steps(rq.Step(call.op()), deadline, error)
        finally:
            CURRENT.reset(token)

    async def _steps(self, step: rq.Step[T], deadline: Deadline,
                     error: BaseException | None = None) -> T:
        """Advance ``step`` to its end, first throwing ``error`` in at its request if given;
        Cancelled out of the operation is the caller's CancelledError again."""
        try:
            if error is not None and step.pending:
                step.send(None, typed(error))
            while step.pending:
                if not answered_here(step, deadline, self.call_timeout_s):
                    reply, error = await self._outcome(step.request, deadline)
                    step.send(reply, typed(error))
        except rq.Cancelled:
            raise asyncio.CancelledError from None
        return step.result  # type: ignore[no-any-return]

    async def _outcome(self, request: Any,
                       deadline: Deadline) -> tuple[Any, BaseException | None]:
        batcher = self._batcher_for(request)
        if batcher is not None:
            call = batcher.submit(request, deadline)
            try:
                return await call.future, None
            except BaseException as exc:
                error = await wait_failed(call, exc)
            if not self._rerouted(request, batcher, error):
                return None, error
        handler = self._handlers[type(request)]
        if type(request) in (rq.Command, rq.Pipeline, rq.Batch) and request.role == rq.QUORUM:
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

    def _batcher_for(self, request: Any) -> Batcher | None:
        """The batcher ``request`` goes out through: its role's (a plain client), or, for a
        script call on a Cluster, that of the primary owning its key; None: sent on its own
        (a Cluster client's first command builds its slot map)."""
        if type(request) is not rq.Command or request.replica_of is not None:
            return None
        batcher = self._batchers.get(request.role)
        if (batcher is not None or request.role not in self._clustered
                or request.args[0] not in SCRIPT_CALLS):
            return batcher
        client = self._clients[request.role]
        if getattr(client, "_initialize", False):
            return None
        node = client.get_node_from_key(key_of(request.args))
        batcher = self._node_batchers.get(node.name)
        if batcher is None:
            batcher = self._node_batchers[node.name] = Batcher(self._node_client(node))
        return batcher

    def _rerouted(self, request: Any, batcher: Batcher, error: BaseException | None) -> bool:
        """Whether a command a Cluster node's batcher failed goes again through the Cluster
        client, which follows a redirection or a lost node (not after a read timeout: the
        connection's Retry has decided that one, see RETRY_TIMEOUTS)."""
        return (isinstance(error, REDIRECTED)
                and batcher is not self._batchers.get(request.role))

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
            if getattr(client, "_initialize", False):
                # redis.asyncio builds a Cluster client's slot map on its first command; a
                # read that picks its node from that map first must build it itself.
                await client.initialize()
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

    async def _batch(self, request: rq.Batch) -> list[tuple[Any, BaseException | None]]:
        client = self._clients[request.role]
        if slot_map(client) is not None:
            return await self._cluster_batch(client, request.commands)
        async with self._place(client):
            pipe = filled_pipeline(client, [command.args for command in request.commands])
            return outcomes(await pipe.execute(raise_on_error=False))

    async def _cluster_batch(self, client: Any, commands: list[rq.Command]
                             ) -> list[tuple[Any, BaseException | None]]:
        """``commands``, each through the batcher of the primary that owns its key (every node
        at once, one write per node); a command that meets a redirection or a lost node is sent
        again on its own through the Cluster client, which follows the cluster. (A Cluster
        pipeline costs far more client CPU, and one that meets a lost node retries the whole
        batch and closes the client in between, failing every command of it until the
        failover.)"""
        if getattr(client, "_initialize", False):
            await client.initialize()  # the slot map the batchers are chosen by
        deadline = CURRENT.get() or Deadline(self.call_timeout_s)
        sent = []
        for command in commands:
            batcher = self._batcher_for(command)
            sent.append(None if batcher is None else batcher.submit(command, deadline))
        out: list[tuple[Any, BaseException | None]] = []
        for command, call in zip(commands, sent, strict=True):
            error: BaseException | None = None
            if call is not None:
                try:
                    out.append((await call.future, None))
                    continue
                except BaseException as exc:
                    error = await wait_failed(call, exc)
                if not isinstance(error, REROUTED):
                    out.append((None, typed(error)))
                    continue
            try:  # not batchable (not a script call), or rerouted
                async with self._place(client):
                    out.append((await client.execute_command(*command.args), None))
            except Exception as exc:
                out.append((None, typed(exc)))
        return out

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
        if request.subscribe:
            doorbell = await self.doorbell(request.bell)
        else:
            found = self._bells.existing(request.bell)
            if found is None:
                return rq.BellState(0, False, False)
            doorbell = found
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

    def endpoint(self) -> tuple[str, int | None] | None:
        """The server writes go to (see :func:`endpoint_of`), for telemetry."""
        return endpoint_of(self._clients[rq.QUORUM])

    async def close_doorbell(self, core: QueueCore, timeout_s: float = 5.0) -> None:
        """Stop the doorbell of ``core``'s queue, waking its waiting pops; wait up to
        ``timeout_s`` seconds for its listener to end."""
        doorbell = self._bells.pop(core)
        if doorbell is not None:
            await doorbell.close(timeout_s)

    async def aclose(self) -> None:
        """Close the per-node clients this driver opened (Cluster slot-owner writes) and stop
        the batchers' deadline timers."""
        for batcher in (*self._batchers.values(), *self._node_batchers.values()):
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
