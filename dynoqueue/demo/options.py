"""How to run ``dynoqueue demo``: :class:`DemoOptions` and their checks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from ..errors import InvalidArgumentError
from .flights import DEFAULT_DAY, ZONES, parse_day

#: The default wall time, in seconds, over which one day's reminders fall due.
DEFAULT_DURATION_S = 20.0


@dataclass
class DemoOptions:
    """How to run the demo.

    Attributes:
        day: the 2013 day to replay.
        duration_s: wall seconds over which the day's reminders fall due (default 20); ignored
            when ``compression`` is set.
        compression: day seconds per wall second (e.g. 3600 = an hour per second); None to
            derive it from ``duration_s``.
        redis_url: use this Redis for every zone instead of starting a zone ring.
        consumers_per_zone: live Workers per zone, >= 1.
        concurrency: handlers of each live Worker, >= 1.
        pop_count: most messages one pop of a Worker claims (its ``batch_size``).
        pop_wait_ms: unused since the consumers are Workers (they wait for the next message
            by themselves); kept for the command line.
        unack_timeout_ms: every lease, ms (short, so the killed Worker's messages return soon).
        unack_handler_interval_ms: how often each zone's unack reprocessor runs, ms.
        write_quorum_timeout_ms: how long a write WAITs for a replica, ms.
        push_batch: messages per push call.
        crash_zone: the zone of the Worker that is killed.
        crash_batch: the killed Worker's concurrency: the most reminders its hung handler
            holds when it is killed; 0: no kill.
        crash_at: when the kill happens, as a fraction (0..1) of the run's schedule (later if
            the doomed Worker holds nothing yet).
        grace_s: how long past the last due time the run may go on before giving up, s.
        max_deliveries: the queue policy's limit of deliveries per reminder.
        retry_backoff_ms: the Workers' first backoff delay after a failed send, ms.
        flaky_every: about one reminder in this many fails its first send (a simulated SMS
            gateway timeout), 0: none.
    """

    day: date = DEFAULT_DAY
    duration_s: float = DEFAULT_DURATION_S
    compression: float | None = None
    redis_url: str | None = None
    consumers_per_zone: int = 2
    concurrency: int = 4
    pop_count: int = 50
    pop_wait_ms: int = 200
    unack_timeout_ms: int = 2000
    unack_handler_interval_ms: int = 250
    write_quorum_timeout_ms: int = 1000
    push_batch: int = 100
    crash_zone: str = "us-east-1b"
    crash_batch: int = 20
    crash_at: float = 0.25
    grace_s: float = 10.0
    max_deliveries: int = 5
    retry_backoff_ms: int = 500
    flaky_every: int = 25

    def validate(self) -> None:
        """Check every option.

        Raises:
            InvalidArgumentError: an option is out of range.
        """
        self.day = parse_day(self.day)
        if self.compression is None:
            if not self.duration_s > 0:
                raise InvalidArgumentError(f"duration must be > 0 s, got {self.duration_s!r}")
        elif not self.compression > 0:
            raise InvalidArgumentError(f"compression must be > 0, got {self.compression!r}")
        for name, low in (("consumers_per_zone", 1), ("concurrency", 1), ("pop_count", 1),
                          ("pop_wait_ms", 0), ("unack_timeout_ms", 2),
                          ("unack_handler_interval_ms", 1), ("write_quorum_timeout_ms", 1),
                          ("push_batch", 1), ("crash_batch", 0), ("max_deliveries", 4),
                          ("retry_backoff_ms", 0), ("flaky_every", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")
        for name in ("concurrency", "pop_count", "crash_batch"):  # a Worker's limits
            if getattr(self, name) > 1_000:
                raise InvalidArgumentError(f"{name} must be at most 1000, got "
                                           f"{getattr(self, name)!r}")
        if self.crash_zone not in ZONES:
            raise InvalidArgumentError(f"crash_zone must be one of {list(ZONES)}")
        if not 0 <= self.crash_at <= 1:
            raise InvalidArgumentError(f"crash_at must be in 0..1, got {self.crash_at!r}")
        if not self.grace_s > 0:
            raise InvalidArgumentError(f"grace_s must be > 0, got {self.grace_s!r}")

