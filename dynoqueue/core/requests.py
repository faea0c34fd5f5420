"""The I/O requests an operation yields, and :class:`Step`, which advances an operation.

A driver answers each request by doing the I/O and sending the reply back, or by throwing the
error the I/O raised into the operation at its ``yield``. Requests are plain data; the
connection *role* says which client serves them: ``QUORUM`` (writes, claims, the primary) or
``READ`` (cheap reads, usually the local zone's replica).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

QUORUM = "quorum"
READ = "read"

T = TypeVar("T")


class Command:
    """One command on a role's client, routed by the client (Cluster: by the command's keys).

    With ``replica_of`` (Cluster read clients only) it runs on a replica of that key's slot.
    A command that is not ``idempotent`` (a claim) is not repeated after a read timeout. With
    ``merge``, a driver that holds several such commands at the same moment may send them as
    one (see :class:`Merge`); the reply is this command's own either way. ``head``, when
    given, is the same object on every call of this command's kind on this queue and equal to
    the first ``len(head)`` args (a script call's script and keys): a driver may keep its
    wire form and encode only the rest.
    """

    __slots__ = ("args", "head", "idempotent", "merge", "replica_of", "role")

    def __init__(self, role: str, args: Sequence[Any], replica_of: str | None = None,
                 idempotent: bool = True, merge: Merge | None = None,
                 head: tuple[Any, ...] | None = None) -> None:
        self.role = role
        self.args = args
        self.replica_of = replica_of
        self.idempotent = idempotent
        self.merge = merge
        self.head = head


class Merge:
    """How commands issued at the same moment join into one (the asyncio driver does it for
    concurrent one-message pushes): commands whose first ``head`` args are equal (the script,
    its keys and the arguments before the per-item ones) become one command with those args
    followed by every command's items in turn, ``per_item`` args each, at most ``limit`` items.
    The joined reply is ``shared`` values, then one value per item; each command gets the
    shared values followed by its own items' values, as if it had run alone at that point.
    """

    __slots__ = ("_after", "head", "limit", "per_item", "shared")

    def __init__(self, head: int, per_item: int, shared: int, limit: int) -> None:
        self.head = head
        self.per_item = per_item
        self.shared = shared
        self.limit = limit
        self._after: dict[int, Merge] = {}

    def after(self, count: int) -> Merge:
        """This merge for commands with ``count`` more args in front (a script's name and
        keys before its ARGV); made once per count."""
        shifted = self._after.get(count)
        if shifted is None:
            shifted = self._after[count] = Merge(count + self.head, self.per_item,
                                                 self.shared, self.limit)
        return shifted


class Pipeline:
    """Commands sent in one round trip (not a transaction); the reply is the list of replies.

    With ``owner_of`` (Cluster only) they all go to the primary owning that key's slot, so a
    write and its ``WAIT`` reach the same node. The first error reply is raised.
    """

    __slots__ = ("commands", "owner_of", "role")

    def __init__(self, role: str, commands: list[Sequence[Any]],
                 owner_of: str | None = None) -> None:
        self.role = role
        self.commands = commands
        self.owner_of = owner_of


class Batch:
    """Commands of several operations run together (a partitioned queue's partitions), sent in
    one round trip per node (a non-transactional pipeline; on a Cluster the client's own,
    which routes each command by its keys and follows MOVED/ASK). Reply: one ``(reply,
    error)`` per command, in order, error None on success: each command's failure is its own
    operation's."""

    __slots__ = ("commands", "role")

    def __init__(self, role: str, commands: list[Command]) -> None:
        self.role = role
        self.commands = commands


class Scan:
    """Every (field, value) of a hash, read with HSCAN on the role's client; reply: a list."""

    __slots__ = ("count", "key", "role")

    def __init__(self, role: str, key: str, count: int) -> None:
        self.role = role
        self.key = key
        self.count = count


class RefreshSlots:
    """Re-read a Cluster client's slot map (after MOVED or a lost node); errors are ignored."""

    __slots__ = ("role",)

    def __init__(self, role: str) -> None:
        self.role = role


class Sleep:
    """Pause ``seconds`` (the sync driver blocks the thread, the asyncio one the task)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Ticket:
    """Take a doorbell ticket for ``channels`` (subscribing first if needed); reply: a
    :class:`BellState`. Taken before a claim, so no ring after it is missed. With
    ``subscribe=False`` it only reads the doorbell the queue already has (not listening when it
    has none): a pop that does not wait notes the count without subscribing."""

    __slots__ = ("bell", "channels", "subscribe")

    def __init__(self, bell: Any, channels: Sequence[str], subscribe: bool = True) -> None:
        self.bell = bell
        self.channels = channels
        self.subscribe = subscribe


class WaitBell:
    """Wait up to ``timeout_s`` for a ring on ``channels`` after ``ticket``; reply: rung?"""

    __slots__ = ("bell", "channels", "ticket", "timeout_s")

    def __init__(self, bell: Any, channels: Sequence[str], ticket: int,
                 timeout_s: float) -> None:
        self.bell = bell
        self.channels = channels
        self.ticket = ticket
        self.timeout_s = timeout_s


class Budget:
    """Restart the call's deadline: ``extra_s`` plus ``call_timeout_ms`` from now (a waiting
    pop: its wait; the unack pass: each queue). Reply: None."""

    __slots__ = ("extra_s",)

    def __init__(self, extra_s: float) -> None:
        self.extra_s = extra_s


class BellState:
    """A doorbell ticket and whether rings reach waiting pops (subscribed, or no doorbell)."""

    __slots__ = ("enabled", "listening", "ticket")

    def __init__(self, ticket: int, listening: bool, enabled: bool) -> None:
        self.ticket = ticket
        self.listening = listening
        self.enabled = enabled


Request = (Command | Pipeline | Batch | Scan | RefreshSlots | Sleep | Ticket | WaitBell
           | Budget)
#: An operation: yields requests, receives replies, returns its result.
Op = Generator[Request, Any, T]


class CommandOp(NamedTuple, Generic[T]):
    """An operation that is one request and its decoding, in the form a driver runs without the
    operation's generator layers (the producer's usual push: each layer costs every call).

    ``command`` is a :class:`Command`, or a :class:`Batch` (a push over several partitions).
    A driver sends it under the call's deadline and returns ``done(reply)``. If sending fails,
    it runs ``op()`` instead, throwing that error in at its first request, which is
    ``command``: the operation then decides as if it had sent it (NOSCRIPT, retries, typed
    errors). If ``done`` raises :class:`Replay` (a Batch whose outcomes hold an error), the
    driver runs ``op()`` with ``reply`` as its first request's reply. ``op()`` run from its
    start is the same operation, for a caller that needs a generator (:func:`as_op`). A
    tuple: made on every producer's call, it costs less to build than an object.
    """

    command: Command | Batch
    done: Callable[[Any], T]
    op: Callable[[], Op[T]]


class Replay(Exception):
    """Raised by a :class:`CommandOp`'s ``done``: the reply needs the general operation (it
    gets the reply, not a second sending)."""


#: What a core's operation method returns and a driver runs: an Op, or a :class:`CommandOp`.
Run = Op[T] | CommandOp[T]


def as_op(run: Run[T]) -> Op[T]:
    """``run`` as a generator operation (a :class:`CommandOp`'s ``op()``)."""
    return run.op() if isinstance(run, CommandOp) else run


class Step(Generic[T]):
    """Advances one operation: ``request`` is what it waits for while ``pending``; feed the
    reply with :meth:`send` (or the error with ``send(None, error)``); ``result`` once done.

    The drivers' loops are ``while step.pending: step.send(*outcome(step.request))``.
    """

    __slots__ = ("_op", "pending", "request", "result")

    def __init__(self, op: Generator[Any, Any, T]) -> None:
        self._op = op
        self.pending = True
        self.request: Any = None
        self.result: Any = None
        self.send(None)

    def send(self, reply: Any, error: BaseException | None = None) -> None:
        """Resume the operation with a reply, or raise ``error`` at its yield."""
        try:
            self.request = self._op.send(reply) if error is None else self._op.throw(error)
        except StopIteration as done:
            self.pending = False
            self.result = done.value


class Cancelled(BaseException):
    """Thrown into an operation whose caller was cancelled (an asyncio task).

    The driver lets a command already sent finish first (it may have leased messages), and
    hands its reply over as ``late_reply`` (None if it failed or nothing was in flight), so
    the operation can undo what its caller will never see, then re-raise.
    """

    def __init__(self, late_reply: Any = None) -> None:
        super().__init__()
        self.late_reply = late_reply
