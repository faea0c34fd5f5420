"""The sync driver: runs core operations on redis-py clients, blocking the calling thread.

:class:`SyncDriver` answers the requests of :mod:`dynoqueue.core.requests`; its script calls go
through a connection pinned per thread (:mod:`dynoqueue.io.pinned`: the transport tuning), and
waiting pops block on a :class:`~dynoqueue.io.thread_doorbell.ThreadDoorbell`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.exceptions import (
    RedisClusterException,
    RedisError,
    ResponseError,
)

from ..core import requests as rq
from ..core.deadline import CURRENT, RETRY_TIMEOUTS, Deadline, seconds_left
from ..core.queue import QueueCore
from . import common
from .cluster import REDIRECTED, REROUTED, SCRIPT_CALLS, endpoint_of, key_of, replica_node, slot_map
from .common import answered_here
from .doorbells import Doorbells
from .pinned import BIG_SEND, Pin, can_poll
from .thread_doorbell import ThreadDoorbell

T = TypeVar("T")

class SyncDriver:
    """Answers core requests with a quorum and a read client (redis.Redis or RedisCluster).

    Every operation runs under one deadline, ``call_timeout_s`` (a waiting pop: its wait plus
    that): no request is sent once it has passed, waits and sleeps end at it, and the
    connections' retries stop before it (see :mod:`dynoqueue.core.deadline`). A request in
    flight is bounded by its client's socket timeouts, which the builders derive from it.

    Args:
        quorum: the client of writes and claims. read: the client of cheap reads.
        call_timeout_s: the deadline of one operation, seconds.
        reply_spin_us: how long a script call busy-polls for its reply before the thread
            sleeps in the kernel, microseconds (>= 0; 0: never; see Pin). Ignored where
            polling does not pay (can_poll).
    """

    def __init__(self, quorum: Any, read: Any, call_timeout_s: float = 10.0, *,
                 reply_spin_us: int = 0) -> None:
        self.call_timeout_s = call_timeout_s
        self._spin_ns = reply_spin_us * 1000 if reply_spin_us > 0 and can_poll() else 0
        self._clients = {rq.QUORUM: quorum, "read": read}
        self._bells = Doorbells(ThreadDoorbell, quorum)
        # Script calls (nearly every operation) on a plain redis.Redis skip redis-py's per-call
        # pool checkout (it polls the socket) and its instrumentation: each thread keeps one
        # connection per role, released when the factory closes. Retries and reconnects (a
        # Sentinel failover included) still go through the connection's own Retry.
        self._pinnable = {role for role, client in self._clients.items()
                          if type(client) is redis.Redis and client.connection is None}
        # On a Cluster the same holds per node: RedisCluster.execute_command checks and encodes
        # every argument in Python (a one-message push cost ~145 us of client CPU).
        self._clustered = {role for role, client in self._clients.items()
                           if slot_map(client) is not None}
        self._pinned = threading.local()
        self._pins: list[tuple[Any, Any]] = []
        self._pins_lock = threading.Lock()
        self._handlers: dict[type, Callable[[Any], Any]] = {
            rq.Command: self._command, rq.Pipeline: self._pipeline, rq.Batch: self._batch,
            rq.Scan: self._scan,
            rq.RefreshSlots: self._refresh,
            rq.Sleep: lambda r: time.sleep(seconds_left(r.seconds)),
            rq.Ticket: self._ticket, rq.WaitBell: self._wait_bell,
        }

    def run(self, op: rq.Run[T]) -> T:
        """Run one operation to its end and return its result (or raise its error). A
        :class:`~dynoqueue.core.requests.CommandOp` is its command, sent at once, and its decoding;
        if sending fails, the call's operation gets the error at that request and runs on (its
        result, or its error, is the call's)."""
        deadline = Deadline(self.call_timeout_s)
        token = CURRENT.set(deadline)
        try:
            if type(op) is rq.CommandOp:
                call: rq.CommandOp[T] = op
                try:
                    reply = self._handlers[type(call.command)](call.command)
                except Exception as exc:  # the operation decides, as if it had sent it
                    return self._steps(rq.Step(call.op()), deadline, exc)
                try:
                    return call.done(reply)
                except rq.Replay:
                    step = rq.Step(call.op())
                    step.send(reply)
                    return self._steps(step, deadline)
            return self._steps(rq.Step(op), deadline)  # type: ignore[arg-type]
        finally:
            CURRENT.reset(token)

    def _steps(self, step: rq.Step[T], deadline: Deadline,
               error: BaseException | None = None) -> T:
        """Advance ``step`` to its end, first throwing ``error`` in at its request if given."""
        if error is not None and step.pending:
            step.send(None, common.typed(error))
        while step.pending:
            if not answered_here(step, deadline, self.call_timeout_s):
                step.send(*self._outcome(step.request))
        return step.result  # type: ignore[no-any-return]

    def _outcome(self, request: Any) -> tuple[Any, BaseException | None]:
        try:
            return self._handlers[type(request)](request), None
        except Exception as exc:  # handed to the operation, which decides
            return None, common.typed(exc)

    def _command(self, request: rq.Command) -> Any:
        if not request.idempotent:  # a claim: never repeated after a read timeout
            token = RETRY_TIMEOUTS.set(False)
            try:
                return self._send(request)
            finally:
                RETRY_TIMEOUTS.reset(token)
        return self._send(request)

    def _send(self, request: rq.Command) -> Any:
        client = self._clients[request.role]
        if request.replica_of is not None:
            client = client.get_redis_connection(replica_node(client, request.replica_of))
        elif request.args[0] in SCRIPT_CALLS:
            if request.role in self._pinnable:
                return self._script_call(request.role, client, request.args, request.head)
            if request.role in self._clustered:
                return self._node_script_call(request, client)
        return client.execute_command(*request.args)

    def _node_script_call(self, request: rq.Command, client: Any) -> Any:
        """A script call on a Cluster, on this thread's pinned connection to the primary that
        owns its first key (as the batches are sent); a redirection or a lost node sends it
        again through the client's routing, which follows the cluster."""
        node = client.get_node_from_key(key_of(request.args))
        try:
            return self._script_call(f"{request.role}@{node.name}",
                                     client.get_redis_connection(node), request.args,
                                     request.head)
        except REDIRECTED:
            return client.execute_command(*request.args)

    def _pin(self, role: str, client: Any) -> Pin:
        """This thread's pinned connection of ``role`` (made on first use)."""
        pin: Pin | None = getattr(self._pinned, role, None)
        if pin is None:
            conn = client.connection_pool.get_connection()
            pin = Pin(conn, common.hiredis_packer(conn), self._spin_ns)
            setattr(self._pinned, role, pin)
            with self._pins_lock:
                self._pins.append((client.connection_pool, conn))
        return pin

    def _script_call(self, role: str, client: Any, args: Sequence[Any],
                     head: tuple[Any, ...] | None = None) -> Any:
        pin = self._pin(role, client)
        conn = pin.conn
        packed = pin.packed(args, head)
        kind = id(head) + (len(packed) > 1 or len(packed[0]) > BIG_SEND)
        try:
            return conn.retry.call_with_retry(lambda: pin.round_trip(packed, kind),
                                              lambda _error: conn.disconnect())
        except ResponseError:  # the script's own error reply: the connection is in step
            raise
        except Exception:  # replies may be left unread: never reuse it out of step
            with contextlib.suppress(Exception):
                conn.disconnect()
            raise

    def release(self) -> None:
        """Give the connections pinned by threads back to their pools (the factory closes)."""
        with self._pins_lock:
            pins, self._pins = self._pins, []
        for pool, conn in pins:
            with contextlib.suppress(RedisError, OSError):
                if getattr(conn, "_sock", None) is not None:  # Python's timeouts again (adopt)
                    conn._sock.settimeout(conn.socket_timeout)
                pool.release(conn)

    def _pipeline(self, request: rq.Pipeline) -> list[Any]:
        client = self._clients[request.role]
        if request.owner_of is not None:
            client = client.get_redis_connection(client.get_node_from_key(request.owner_of))
        return list(common.filled_pipeline(client, request.commands).execute())

    def _batch(self, request: rq.Batch) -> list[tuple[Any, BaseException | None]]:
        client = self._clients[request.role]
        if request.role in self._pinnable:
            pin = self._pin(request.role, client)
            return self._receive(pin, request.commands, self._send_batch(pin, request.commands))
        if slot_map(client) is not None:
            return self._cluster_batch(request.role, client, request.commands)
        pipe = common.filled_pipeline(client, [command.args for command in request.commands])
        return common.outcomes(pipe.execute(raise_on_error=False))

    def _cluster_batch(self, role: str, client: Any, commands: list[rq.Command]
                       ) -> list[tuple[Any, BaseException | None]]:
        """``commands`` grouped by the primary that owns each one's key, each group written
        on this thread's pinned connection to that node, every group sent before any reply is
        read (so the nodes work at once); a command that meets MOVED, ASK or a lost node is
        sent again on its own through the client's routing, which follows the cluster.
        redis-py's ClusterPipeline costs ~3x the client CPU (a 12-partition push ran at a
        third of a one-partition push's rate)."""
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, command in enumerate(commands):
            node = client.get_node_from_key(key_of(command.args))
            group = groups.get(node.name)
            if group is None:
                group = groups[node.name] = (node, [])
            group[1].append(i)
        out: list[tuple[Any, BaseException | None]] = [(None, None)] * len(commands)
        sent = []
        for name, (node, indices) in groups.items():
            mine = [commands[i] for i in indices]
            try:  # a node that refuses its first connection fails only its own commands
                pin = self._pin(f"{role}@{name}", client.get_redis_connection(node))
                sent.append((pin, mine, indices, self._send_batch(pin, mine)))
            except Exception as exc:  # that node is lost: its commands are re-routed below
                for i in indices:
                    out[i] = (None, common.typed(exc))
        for pin, mine, indices, packed in sent:
            try:
                replies = self._receive(pin, mine, packed)
            except Exception as exc:
                replies = [(None, common.typed(exc))] * len(mine)
            for i, reply in zip(indices, replies, strict=True):
                out[i] = reply
        for i, (_, error) in enumerate(out):
            if error is not None and isinstance(error, REROUTED):
                try:
                    out[i] = (client.execute_command(*commands[i].args), None)
                except Exception as exc:
                    out[i] = (None, common.typed(exc))
        return out

    @staticmethod
    def _send_batch(pin: Pin, commands: list[rq.Command]) -> list[bytes]:
        """Write ``commands`` on ``pin``'s connection, encoded as its script calls are (kept
        heads, hiredis), in one buffer and one send; what was sent (for a retry)."""
        packed = [b"".join(part for command in commands
                           for part in pin.packed(command.args, command.head))]
        try:
            pin.conn.send_packed_command(packed, check_health=False)
        except Exception:
            with contextlib.suppress(Exception):
                pin.conn.disconnect()
            raise
        return packed

    @staticmethod
    def _receive(pin: Pin, commands: list[rq.Command], packed: list[bytes]
                 ) -> list[tuple[Any, BaseException | None]]:
        """The replies of ``commands`` sent by :meth:`_send_batch`, in order: redis-py's own
        pipeline checks every argument in Python, which cost a partitioned push twice the
        client CPU of a one-partition push. A lost connection sends them again (the
        connection's Retry; batched commands are writes that may be repeated, and reads)."""
        conn = pin.conn
        first = [True]

        def round_trip() -> list[tuple[Any, BaseException | None]]:
            if not first[0]:
                conn.send_packed_command(packed, check_health=False)
            first[0] = False
            out: list[tuple[Any, BaseException | None]] = []
            for _ in commands:
                try:
                    out.append((conn.read_response(), None))
                except ResponseError as exc:  # that command's own error reply: in step
                    out.append((None, common.typed(exc)))
            return out

        try:
            out: list[tuple[Any, BaseException | None]] = conn.retry.call_with_retry(
                round_trip, lambda _error: conn.disconnect())
            return out
        except Exception:  # replies may be left unread: never reuse it out of step
            with contextlib.suppress(Exception):
                conn.disconnect()
            raise

    def _scan(self, request: rq.Scan) -> list[tuple[Any, Any]]:
        return list(self._clients[request.role].hscan_iter(request.key, count=request.count))

    def _refresh(self, request: rq.RefreshSlots) -> None:
        manager = slot_map(self._clients[request.role])
        if manager is not None:  # a Cluster client
            with contextlib.suppress(RedisError, RedisClusterException):
                manager.initialize()

    def _ticket(self, request: rq.Ticket) -> rq.BellState:
        if request.subscribe:
            doorbell = self.doorbell(request.bell)
        else:
            found = self._bells.existing(request.bell)
            if found is None:
                return rq.BellState(0, False, False)
            doorbell = found
        return rq.BellState(doorbell.ticket(request.channels), doorbell.rings.listening,
                            doorbell.enabled and not doorbell.rings.denied)

    def _wait_bell(self, request: rq.WaitBell) -> bool:
        return self.doorbell(request.bell).wait(request.channels, request.ticket,
                                                seconds_left(request.timeout_s))

    def doorbell(self, core: QueueCore) -> ThreadDoorbell:
        """The doorbell of ``core``'s queue; subscribed before the first claim, or a ring in
        between would be missed (waiting at most 2 s, or half the call's time left: a
        frozen server never confirms, and the pop then polls)."""
        doorbell = self._bells.get(core)
        if doorbell.enabled:
            doorbell.wait_until_listening(timeout_s=min(2.0, seconds_left(4.0) / 2))
        return doorbell

    def endpoint(self) -> tuple[str, int | None] | None:
        """The server writes go to (see :func:`endpoint_of`), for telemetry."""
        return endpoint_of(self._clients[rq.QUORUM])

    def close_doorbell(self, core: QueueCore, timeout_s: float = 5.0) -> None:
        """Stop the doorbell of ``core``'s queue, waking its waiting pops; wait up to
        ``timeout_s`` seconds for its listener to end."""
        doorbell = self._bells.pop(core)
        if doorbell is not None:
            doorbell.close(timeout_s)
