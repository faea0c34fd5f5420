"""Consumers: a Worker pops, runs a handler, and acks, with lease heartbeats, retries with
backoff, dead letters and a graceful shutdown.

* :class:`Worker` (also ``dynoqueue.Worker``): sync handlers on threads.
* :class:`dynoqueue.asyncio.Worker`: async handlers as tasks; the same arguments.
* :class:`Retry`, :class:`DeadLetterNow`: what a handler raises to retry later or give up.
* :class:`Backoff`: the delays of failed messages. :class:`WorkerHooks`: callbacks for metrics.

The logic is written once, without I/O (:mod:`.engine`: the programs and their decisions;
:mod:`.program`: what they yield; :mod:`.sends`: the finisher's calls of the queue;
:mod:`.outcomes`: what a handler's end means); only running it on threads (:mod:`.threads`) or
tasks (:mod:`.tasks`) exists twice. ``dynoqueue worker pkg.module:handler`` runs a Worker
from the command line.
"""

from .hooks import WorkerHooks
from .outcomes import Backoff, DeadLetterNow, Retry
from .threads import Worker

__all__ = ["Backoff", "DeadLetterNow", "Retry", "Worker", "WorkerHooks"]
