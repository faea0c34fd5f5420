"""The sync driver's transport tuning: a connection each thread keeps for its script calls
(:class:`Pin`), with the wire form of repeated command heads kept, kernel socket timeouts, and
replies busy-polled for while that gets them sooner (what each kind of call has learned:
:class:`Kind`). :class:`~dynoqueue.io.sync.SyncDriver` sends its script calls through it."""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: Most command heads a pinned connection keeps the wire form of (see Pin).
MAX_HEADS = 256
#: The kernel times a pinned connection's reads and writes out (see Pin.adopt): Linux only,
#: where SO_RCVTIMEO / SO_SNDTIMEO take a struct timeval of two longs.
LINUX = sys.platform.startswith("linux")
KERNEL_TIMEOUTS = LINUX
#: A peek that never blocks: is a reply's first byte there yet (see Pin.poll)?
PEEK_NOW = getattr(socket, "MSG_PEEK", 0) | getattr(socket, "MSG_DONTWAIT", 0)
#: Commands bigger than this, or sent in several parts, are a kind of call of their own in
#: Pin.waits: a 500-message push takes far longer than a one-message push of the same script.
BIG_SEND = 4096
#: A thread of this process is busy-polling: others sleep instead, so that polling threads
#: never hold the GIL from each other nor take every CPU from the server they wait for.
#: (Set and cleared under the GIL; two threads that both see False at once poll together.)
POLLING = [False]
if hasattr(os, "register_at_fork"):  # a child forked while a thread polled would never poll
    os.register_at_fork(after_in_child=lambda: POLLING.__setitem__(0, False))
#: Calls of a kind between two tries of the way it does not prefer (polling or sleeping):
#: 16 at first and after a try that changed the preference, doubling up to 1024 after each
#: try that did not.
EXPLORE_MIN = 16
EXPLORE_MAX = 1024


def can_poll() -> bool:
    """Busy-polling for replies pays: Linux (MSG_DONTWAIT) with at least two usable CPUs, so
    that the poll never takes the CPU the server needs to answer."""
    if not LINUX or not PEEK_NOW:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return False


class Pin:
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
    when polled for and when slept for is remembered (Kind): a kind polls only while that
    gets its replies sooner, within the budget. So a slow script's caller sleeps at once,
    and on a machine whose CPUs are all busy (where a poll would take the CPU the server
    needs) callers sleep; now and then a call tries the other way (every 16th to 1024th
    call), so both come back when things change. One thread of the process polls at a time
    (POLLING).
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
        #: What each kind of call has learned (see Kind, round_trip).
        self.waits: dict[int, Kind] = {}

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
            if poll and not POLLING[0]:
                POLLING[0] = True
                try:
                    self.poll(sent + self.spin_ns)
                finally:
                    POLLING[0] = False
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
                learned.gap = EXPLORE_MIN if self.prefers_poll(learned) != prefers \
                    else min(2 * learned.gap, EXPLORE_MAX)
                learned.countdown = learned.gap
            return reply
        except RedisConnectionError as exc:
            if isinstance(exc.__context__, BlockingIOError):
                raise RedisTimeoutError(f"Timeout {doing} socket") from exc
            raise

    def prefers_poll(self, learned: Kind) -> bool:
        """Whether a kind of call polls: while polling gets its replies clearly sooner than
        sleeping does (by a fifth: a poll costs CPU, and on a machine whose CPUs are all busy
        wake-ups are cheap and the two come out even), within the budget; and while nothing
        is known yet."""
        polled, slept = learned.polled, learned.slept
        return not polled or (polled < self.spin_ns and (not slept or 5 * polled < 4 * slept))

    def learn(self, kind: int) -> Kind:
        """A new kind of call's record; forgets every kind when there are many (queues come
        and go)."""
        if len(self.waits) >= 2 * MAX_HEADS:
            self.waits.clear()
        learned = self.waits[kind] = Kind()
        return learned

    def poll(self, until_ns: int) -> None:
        """Return once the reply's first byte is readable, the socket fails or closes (the
        read that follows reports it), or at ``until_ns`` (monotonic ns)."""
        recv = self.sock.recv
        while True:
            try:
                recv(1, PEEK_NOW)
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
        if KERNEL_TIMEOUTS and plain and timeout:
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
                return [with_head(pack, self.heads, args, head)]
            except TypeError:  # an argument type hiredis does not pack: let redis-py do it
                pass
        return self.conn.pack_command(*args)


class Kind:
    """What one kind of call (see Pin) has learned: moving averages of how long its replies
    took when polled for and when slept for (ns; 0: not known yet), the calls left until it
    next tries the way it does not prefer, and the gap between such tries."""

    __slots__ = ("countdown", "gap", "polled", "slept")

    def __init__(self) -> None:
        self.polled = 0.0
        self.slept = 0.0
        self.countdown = EXPLORE_MIN
        self.gap = EXPLORE_MIN


def with_head(pack: Callable[[tuple[Any, ...]], bytes],
               heads: dict[int, tuple[tuple[Any, ...], bytes]], args: Sequence[Any],
               head: tuple[Any, ...]) -> bytes:
    """``pack(args)``, from the kept wire form of ``head`` (``args`` starts with it) and the
    rest packed now: a RESP array is its length line, then each arg's own bytes."""
    kept = heads.get(id(head))
    if kept is None or kept[0] is not head:  # keyed by identity: keep head alive with it
        if len(heads) >= MAX_HEADS:  # a few per queue; never grow without bound
            heads.clear()
        packed_head = pack(head)
        kept = heads[id(head)] = (head, packed_head[packed_head.index(b"\n") + 1:])
    rest = pack(tuple(args[len(head):]))
    return b"".join((b"*%d\r\n" % len(args), kept[1], rest[rest.index(b"\n") + 1:]))
