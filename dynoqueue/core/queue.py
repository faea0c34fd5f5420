"""QueueCore: every operation of one named queue, as a generator both APIs run.

Each public method returns an operation (see :mod:`dynoqueue.core`): it validates its input
*before* yielding anything, so bad input never reaches Redis, then yields requests and decodes
their replies. Every state change is one Lua script (``dynoqueue/scripts``) run on the quorum
connection; cheap reads (peek, size, shard sizes, local_get, scans) go to the read connection.
Redis errors surface as :class:`~dynoqueue.errors.RedisOperationError` naming the operation
and key.

The operations are grouped by what they do, one module each, as redis-py groups its commands
in mixins: :mod:`~dynoqueue.core.produce`, :mod:`~dynoqueue.core.consume`,
:mod:`~dynoqueue.core.leases`, :mod:`~dynoqueue.core.inspection`,
:mod:`~dynoqueue.core.upkeep` and :mod:`~dynoqueue.core.pausing`, over what they share
(:mod:`~dynoqueue.core.shared`: the state, the checks, the guarded calls);
:mod:`~dynoqueue.core.sender` is the send path and :mod:`~dynoqueue.core.replies` the reply
decoding.
"""

from __future__ import annotations

from .consume import Consuming
from .inspection import Inspecting
from .leases import Leasing
from .pausing import Pausing
from .produce import Producing
from .schedules import Scheduling
from .upkeep import Upkeep


class QueueCore(Producing, Consuming, Leasing, Inspecting, Upkeep, Scheduling, Pausing):
    """The operations of one queue over all shards (the logic behind both DynoQueue classes).

    Constructed as :class:`~dynoqueue.core.shared.QueueState` (same arguments and errors); each
    base class adds one group of operations over that shared state.
    """

    def __repr__(self) -> str:
        return f"DynoQueue({self.name!r}, shards={self.shards}, local={self.local_shard!r})"
