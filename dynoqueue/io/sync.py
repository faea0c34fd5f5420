"""The sync driver: runs core operations on redis-py clients, blocking the calling thread.

:class:`SyncDriver` answers the requests of :mod:`dynoqueue.core.requests`;
:class:`ThreadDoorbell` runs the doorbell listener of :mod:`dynoqueue.core.doorbell` in a
daemon thread and lets waiting pops block on a condition variable.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import doorbell as bell
from ..core import requests as rq
from ..core.deadline import CURRENT, RETRY_TIMEOUTS, Deadline, seconds_left
from ..core.queue import QueueCore
from . import common
from .common import DoorbellBase, Doorbells, answered_here

T = TypeVar("T")
_SCRIPT_CALLS = ("EVALSHA", "EVAL")
#: Most command heads a pinned connection keeps the wire form of (see _Pin).
_MAX_HEADS = 256
#: The kernel times a pinned connection's reads and writes out (see _Pin.adopt): Linux only,
#: where SO_RCVTIMEO / SO_SNDTIMEO take a struct timeval of two longs.
_LINUX = sys.platform.startswith("linux")
_KERNEL_TIMEOUTS = _LINUX
#: A peek that never blocks: is a reply's first byte there yet (see _Pin.poll)?
_PEEK_NOW = getattr(socket, "MSG_PEEK", 0) | getattr(socket, "MSG_DONTWAIT", 0)
#: Commands bigger than this, or sent in several parts, are a kind of call of their own in
#: _Pin.waits: a 500-message push takes far longer than a one-message push of the same script.
_BIG_SEND = 4096
#: A thread of this process is busy-polling: others sleep instead, so that polling threads
#: never hold the GIL from each other nor take every CPU from the server they wait for.
#: (Set and cleared under the GIL; two threads that both see False at once poll together.)
_POLLING = [False]
if hasattr(os, "register_at_fork"):  # a child forked while a thread polled would never poll
    os.register_at_fork(after_in_child=lambda: _POLLING.__setitem__(0, False))
#: Calls of a kind between two tries of the way it does not prefer (polling or sleeping):
#: 16 at first and after a try that changed the preference, doubling up to 1024 after each
#: try that did not.
_EXPLORE_MIN = 16
_EXPLORE_MAX = 1024


def _can_poll() -> bool:
    """Busy-polling for replies pays: Linux (MSG_DONTWAIT) with at least two usable CPUs, so
    that the poll never takes the CPU the server needs to answer."""
    if not _LINUX or not _PEEK_NOW:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return False


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
            sleeps in the kernel, microseconds (>= 0; 0: never; see _Pin). Ignored where
            polling does not pay (_can_poll).
    """

    def __init__(self, quorum: Any, read: Any, call_timeout_s: float = 10.0, *,
                 reply_spin_us: int = 0) -> None:
        self.call_timeout_s = call_timeout_s
        self._spin_ns = reply_spin_us * 1000 if reply_spin_us > 0 and _can_poll() else 0
        self._clients = {rq.QUORUM: quorum, "read": read}
        self._bells = Doorbells(ThreadDoorbell, quorum)
        # Script calls (nearly every operation) on a plain redis.Redis skip redis-py's per-call
        # pool checkout (it polls the socket) and its instrumentation: each thread keeps one
        # connection per role, released when the factory closes. Retries and reconnects (a
        # Sentinel failover included) still go through the connection's own Retry.
        self._pinnable = {role for role, client in self._clients.items()
                          if type(client) is redis.Redis and client.connection is None}
        self._pinned = threading.local()
        self._pins: list[tuple[Any, Any]] = []
        self._pins_lock = threading.Lock()
        self._handlers: dict[type, Callable[[Any], Any]] = {
            rq.Command: self._command, rq.Pipeline: self._pipeline, rq.Scan: self._scan,
            rq.RefreshSlots: self._refresh,
            rq.Sleep: lambda r: time.sleep(seconds_left(r.seconds)),
            rq.Ticket: self._ticket, rq.WaitBell: self._wait_bell,
        }

    def run(self, op: rq.Op[T]) -> T:
        """Run one operation to its end and return its result (or raise its error)."""
        deadline = Deadline(self.call_timeout_s)
        token = CURRENT.set(deadline)
        try:
            return self._steps(rq.Step(op), deadline)
        finally:
            CURRENT.reset(token)

    def run_call(self, command: rq.Command, done: Callable[[Any], T],
                 op: Callable[[], rq.Op[T]]) -> T:
        """``done(reply)`` of ``command``, sent at once under the call's deadline: an
        operation that is one command and its decoding, run without the operation's layers
        (see QueueCore.push_call). If sending it fails, ``op()``, whose first request is that
        command, gets the error there and runs on (its result, or its error, is the call's).
        """
        deadline = Deadline(self.call_timeout_s)
        token = CURRENT.set(deadline)
        try:
            try:
                reply = self._command(command)
            except Exception as exc:  # the operation decides, as if it had sent the command
                step = rq.Step(op())
                if step.pending:
                    step.send(None, common.typed(exc))
                return self._steps(step, deadline)
            return done(reply)
        finally:
            CURRENT.reset(token)

    def _steps(self, step: rq.Step[T], deadline: Deadline) -> T:
        while step.pending:
            if not answered_here(step, deadline, self.call_timeout_s):
                step.send(*self._outcome(step.request))
        return step.result  # type: ignore[no-any-return]

    def _outcome(self, request: Any) -> tuple[Any, Exception | None]:
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
            client = client.get_redis_connection(common.replica_node(client, request.replica_of))
        elif request.role in self._pinnable and request.args[0] in _SCRIPT_CALLS:
            return self._script_call(request.role, client, request.args, request.head)
        return client.execute_command(*request.args)

    def _script_call(self, role: str, client: Any, args: Sequence[Any],
                     head: tuple[Any, ...] | None = None) -> Any:
        pin = getattr(self._pinned, role, None)
        if pin is None:
            conn = client.connection_pool.get_connection()
            pin = _Pin(conn, common.hiredis_packer(conn), self._spin_ns)
            setattr(self._pinned, role, pin)
            with self._pins_lock:
                self._pins.append((client.connection_pool, conn))
        conn = pin.conn
        packed = pin.packed(args, head)
        kind = id(head) + (len(packed) > 1 or len(packed[0]) > _BIG_SEND)
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

    def _scan(self, request: rq.Scan) -> list[tuple[Any, Any]]:
        return list(self._clients[request.role].hscan_iter(request.key, count=request.count))

    def _refresh(self, request: rq.RefreshSlots) -> None:
        manager = common.slot_map(self._clients[request.role])
        if manager is not None:  # a Cluster client
            with contextlib.suppress(RedisError, RedisClusterException):
                manager.initialize()

    def _ticket(self, request: rq.Ticket) -> rq.BellState:
        doorbell = self.doorbell(request.bell)
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

    def close_doorbell(self, core: QueueCore, timeout_s: float = 5.0) -> None:
        """Stop the doorbell of ``core``'s queue, waking its waiting pops; wait up to
        ``timeout_s`` seconds for its listener to end."""
        doorbell = self._bells.pop(core)
        if doorbell is not None:
            doorbell.close(timeout_s)


class _Pin:
    """A connection a thread keeps for its script calls, with how to encode them: hiredis's C
    packer straight away when it is installed and the client encodes text as strict UTF-8
    (what hiredis does), else the connection's packer (redis-py's own checks every argument
    in Python first: ~0.1 us each, 4,500 of them in a 500-message push). The wire form of a
    command's ``head`` (a script's sha and keys, the same tuple on every call of a queue's
    script) is kept, so a one-message push encodes 11 args instead of 30.

    Replies are busy-polled for up to ``spin_ns`` before the thread sleeps in the kernel:
    waking a sleeping thread on an idle CPU can cost more than a loopback round trip itself
    (PING: ~80 us sleeping, ~30 us polling, measured in a VM), so a quick script's caller
    gets its reply far sooner. How long each kind of call (script head, small or big) takes
    when polled for and when slept for is remembered (_Kind): a kind polls only while that
    gets its replies sooner, within the budget. So a slow script's caller sleeps at once,
    and on a machine whose CPUs are all busy (where a poll would take the CPU the server
    needs) callers sleep; now and then a call tries the other way (every 16th to 1024th
    call), so both come back when things change. One thread of the process polls at a time
    (_POLLING).
    """

    __slots__ = ("conn", "direct", "heads", "pack", "pollable", "sock", "spin_ns", "waits")

    def __init__(self, conn: Any, pack: Callable[[tuple[Any, ...]], bytes] | None,
                 spin_ns: int = 0) -> None:
        self.conn = conn
        self.pack = pack
        self.heads: dict[int, tuple[tuple[Any, ...], bytes]] = {}
        #: A connection with its own socket (not a client-side cache's proxy of one).
        self.direct = isinstance(conn, AbstractConnection)
        #: The connection's socket this pin last set up (adopt), None before any.
        self.sock: Any = None
        #: The longest busy-poll for a reply, ns (0: never).
        self.spin_ns = spin_ns
        #: The socket is a blocking plain socket and spin_ns > 0 (set by adopt).
        self.pollable = False
        #: What each kind of call has learned (see _Kind, round_trip).
        self.waits: dict[int, _Kind] = {}

    def round_trip(self, packed: list[bytes], kind: int = 0) -> Any:
        """Send ``packed`` on the connection and read its reply (redis-py's
        ``send_packed_command`` and ``read_response``, which a Sentinel connection's checks
        override). A new socket of the connection (the first, or one after a reconnect,
        which the send makes) is set up first (adopt). ``kind`` names what sort of call this
        is, for how long its replies take (see the class)."""
        conn = self.conn
        # The kernel's timeout of a socket set up by adopt reads as EAGAIN: raised as the
        # TimeoutError the socket module's own timeout gives (so that a claim is not sent
        # again).
        doing = "writing to"
        try:
            # From before the send: a server woken on this CPU may answer before the send
            # returns, and that time counts too.
            sent = time.monotonic_ns()
            conn.send_packed_command(packed, check_health=False)
            doing = "reading from"
            if self.direct:
                sock = conn._sock
                if sock is not self.sock and sock is not None:
                    self.adopt(sock)
            if not self.pollable:
                return conn.read_response()
            learned = self.waits.get(kind)
            if learned is None:
                learned = self.learn(kind)
            prefers = self.prefers_poll(learned)
            learned.countdown -= 1
            exploring = learned.countdown <= 0  # now and then, try the way not preferred
            poll = prefers != exploring
            if poll and not _POLLING[0]:
                _POLLING[0] = True
                try:
                    self.poll(sent + self.spin_ns)
                finally:
                    _POLLING[0] = False
            else:
                poll = False
            reply = conn.read_response()
            took = time.monotonic_ns() - sent
            # A try of the other way, or a first reading, replaces its estimate (it may be
            # long out of date); the usual reading moves it by a quarter of the difference.
            old = learned.polled if poll else learned.slept
            new = took if exploring or not old else old + (took - old) / 4
            if poll:
                learned.polled = new
            else:
                learned.slept = new
            if exploring:  # tries that change nothing come ever more rarely
                learned.gap = _EXPLORE_MIN if self.prefers_poll(learned) != prefers \
                    else min(2 * learned.gap, _EXPLORE_MAX)
                learned.countdown = learned.gap
            return reply
        except RedisConnectionError as exc:
            if isinstance(exc.__context__, BlockingIOError):
                raise RedisTimeoutError(f"Timeout {doing} socket") from exc
            raise

    def prefers_poll(self, learned: _Kind) -> bool:
        """Whether a kind of call polls: while polling gets its replies clearly sooner than
        sleeping does (by a fifth: a poll costs CPU, and on a machine whose CPUs are all busy
        wake-ups are cheap and the two come out even), within the budget; and while nothing
        is known yet."""
        polled, slept = learned.polled, learned.slept
        return not polled or (polled < self.spin_ns and (not slept or 5 * polled < 4 * slept))

    def learn(self, kind: int) -> _Kind:
        """A new kind of call's record; forgets every kind when there are many (queues come
        and go)."""
        if len(self.waits) >= 2 * _MAX_HEADS:
            self.waits.clear()
        learned = self.waits[kind] = _Kind()
        return learned

    def poll(self, until_ns: int) -> None:
        """Return once the reply's first byte is readable, the socket fails or closes (the
        read that follows reports it), or at ``until_ns`` (monotonic ns)."""
        recv = self.sock.recv
        while True:
            try:
                recv(1, _PEEK_NOW)
                return
            except BlockingIOError:
                if time.monotonic_ns() >= until_ns:
                    return
            except OSError:
                return

    def adopt(self, sock: Any) -> None:
        """Let the kernel time ``sock``'s reads and writes out instead of Python. A socket
        with a timeout (``socket_timeout``; redis-py's default is 5 s) makes every send and
        receive a poll() and then the call: 4 system calls a round trip instead of 2, and
        ~4 us more client CPU per script call (measured, one-message pushes on a busy box).
        The same timeout set as SO_RCVTIMEO / SO_SNDTIMEO on a blocking socket holds each
        call just as long; one that runs out fails with EAGAIN, raised as redis-py's
        TimeoutError (round_trip). Plain TCP and Unix sockets on Linux only (TLS and patched
        sockets keep Python's timeouts, and are not polled); a socket without a timeout is
        left as it is.
        """
        self.sock = sock
        plain = type(sock) is socket.socket
        timeout = sock.gettimeout()
        if _KERNEL_TIMEOUTS and plain and timeout:
            seconds = int(timeout)
            micros = int((timeout - seconds) * 1e6)
            value = struct.pack("ll", seconds, micros if seconds or micros else 1)  # 0 = never
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
            sock.settimeout(None)
        # A peek of a socket with Python's timeout would wait in poll(): blocking ones only.
        self.pollable = self.spin_ns > 0 and plain and sock.gettimeout() is None

    def packed(self, args: Sequence[Any], head: tuple[Any, ...] | None) -> Any:
        pack = self.pack
        if pack is not None:
            try:
                if head is None:
                    return [pack(tuple(args))]
                return [_with_head(pack, self.heads, args, head)]
            except TypeError:  # an argument type hiredis does not pack: let redis-py do it
                pass
        return self.conn.pack_command(*args)


class _Kind:
    """What one kind of call (see _Pin) has learned: moving averages of how long its replies
    took when polled for and when slept for (ns; 0: not known yet), the calls left until it
    next tries the way it does not prefer, and the gap between such tries."""

    __slots__ = ("countdown", "gap", "polled", "slept")

    def __init__(self) -> None:
        self.polled = 0.0
        self.slept = 0.0
        self.countdown = _EXPLORE_MIN
        self.gap = _EXPLORE_MIN


def _with_head(pack: Callable[[tuple[Any, ...]], bytes],
               heads: dict[int, tuple[tuple[Any, ...], bytes]], args: Sequence[Any],
               head: tuple[Any, ...]) -> bytes:
    """``pack(args)``, from the kept wire form of ``head`` (``args`` starts with it) and the
    rest packed now: a RESP array is its length line, then each arg's own bytes."""
    kept = heads.get(id(head))
    if kept is None or kept[0] is not head:  # keyed by identity: keep head alive with it
        if len(heads) >= _MAX_HEADS:  # a few per queue; never grow without bound
            heads.clear()
        packed_head = pack(head)
        kept = heads[id(head)] = (head, packed_head[packed_head.index(b"\n") + 1:])
    rest = pack(tuple(args[len(head):]))
    return b"".join((b"*%d\r\n" % len(args), kept[1], rest[rest.index(b"\n") + 1:]))


class ThreadDoorbell(DoorbellBase):
    """A pub/sub listener thread over a fixed set of channels.

    Args:
        conn: the client to subscribe through (the quorum connection: scripts publish on the
            primary).
        channels: the channel names, one per shard.
        enabled: False for servers without pub/sub (Dynomite): no thread, no subscription;
            :meth:`wait` only sleeps, so waiting pops poll.
    """

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        super().__init__(conn, channels, enabled)
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._handlers: dict[type, Callable[[Any], Any]] = {
            bell.Subscribe: self._subscribe, bell.NextMessage: self._next,
            bell.Unsubscribe: self._unsubscribe, bell.Rang: self._rang,
            bell.Listening: self._listening, bell.Pause: lambda r: self._closed.wait(r.seconds),
        }
        self._thread = threading.Thread(target=self._run, args=(channels,),
                                        name="dynoqueue-doorbell", daemon=True)
        if enabled:
            self._thread.start()

    def wait_until_listening(self, timeout_s: float) -> bool:
        """Block until subscribed (or ``timeout_s`` seconds pass); return whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: self.rings.listening or self.rings.denied
                                       or self._closed.is_set(), timeout_s)

    def ticket(self, channels: Sequence[str]) -> int:
        """A token for :meth:`wait`: take it before checking the queue, so no ring is missed."""
        with self._cond:
            return self.rings.ticket(channels)

    def wait(self, channels: Sequence[str], ticket: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for a ring on any of ``channels`` after ``ticket``.

        Returns:
            True if rung (or closed, or resubscribed), False on timeout.
        """
        with self._cond:
            return self._cond.wait_for(
                lambda: self.rings.ticket(channels) != ticket or self._closed.is_set(), timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the listener thread and wait up to ``timeout_s`` seconds for it to end (a
        daemon thread stuck on a frozen server ends at its socket timeout, unwaited)."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self.enabled:
            self._thread.join(timeout=timeout_s)

    def _run(self, channels: Sequence[str]) -> None:
        step = rq.Step(bell.listen(channels, self._closed.is_set))
        while step.pending:
            try:
                step.send(self._handlers[type(step.request)](step.request))
            except Exception as exc:  # handed to the listener, which logs and retries
                step.send(None, exc)

    def _subscribe(self, request: bell.Subscribe) -> Any:
        pubsub = self._conn.pubsub()
        try:
            pubsub.subscribe(*request.channels)
        except BaseException:
            self._unsubscribe(bell.Unsubscribe(pubsub))
            raise
        return pubsub

    def _next(self, request: bell.NextMessage) -> Any:
        return request.handle.get_message(timeout=request.timeout_s)

    def _unsubscribe(self, request: bell.Unsubscribe) -> None:
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            request.handle.close()

    def _rang(self, request: bell.Rang) -> None:
        with self._cond:
            self.rings.bump(request.channel)
            self._cond.notify_all()

    def _listening(self, request: bell.Listening) -> None:
        if request.denied is not None:
            bell.report_denied(self._conn, self.rings.channels, request.denied)
        with self._cond:
            self.rings.listening = request.value
            self.rings.denied = request.denied is not None
            self._cond.notify_all()
