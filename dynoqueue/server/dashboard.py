"""The dashboard: a page at ``/`` (plain HTML and a small script, no build step) and the JSON it
reads and posts (``/api/...``).

The page lists every queue (every registered one, empty or not) with its partitions, waiting,
ready, delayed, leased and dead counts, the oldest ready message's age and the rates of change
per second (from one refresh to the next); a click on a queue shows its waiting-time buckets as
a bar chart, its partitions (waiting, leased, node, slot), its limits and how often they held
pops back, its recurring schedules, a button that pauses or resumes it, and its dead letters,
with buttons that redrive the selected ones or all. The page itself holds no data, so it is
served without the token; every ``/api`` route needs it. The page takes it from its link's
fragment (``/#token=...``: a fragment is never sent to the server, so it stays out of access
logs; the page removes it from the address bar) or, when the server answers 401, from a login
form on the page (no ``prompt()``, which would block a headless browser), and keeps it in the
tab's session storage.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from ..metrics.names import WAITING_BUCKETS, bucket_label, bucket_title
from ..metrics.placement import Placement, placements
from ..model.policy import QueuePolicy
from ..model.schedules import schedule_fields
from ..model.stats import QueueStats
from .context import ServerState
from .http import JSON, BadRequest, json_body
from .page import PAGE

#: Most dead letters one page shows.
MAX_DEAD = 500


def limits_of(policy: QueuePolicy | None) -> dict[str, Any]:
    """A queue's limits as the dashboard shows them (0 / None: none)."""
    limit = policy.rate_limit if policy is not None else None
    return {"max_in_flight": policy.max_in_flight if policy is not None else 0,
            "rate_limit": None if limit is None else {"count": limit.count,
                                                      "per_ms": limit.per_ms}}


def partition_rows(stats: QueueStats, homes: list[Placement]) -> list[dict[str, Any]]:
    """Each partition of a queue as the dashboard's detail shows it: waiting, leased, its
    node (``host:port``, None when unknown) and Cluster slot (None off a Cluster)."""
    return [{"partition": part.partition or 0, "waiting": part.total("waiting"),
             "leased": part.total("leased"), "node": home.node, "slot": home.slot}
            for part, home in zip(stats.partitions or [stats], homes, strict=False)]


def routes(state: ServerState) -> list[Route]:
    """The dashboard's routes over ``state``."""

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    async def queues(request: Request) -> JSON:
        factory = state.factory()
        stats = await factory.stats()
        return JSON({"prefix": state.settings.prefix, "queues": [{
            "queue": s.queue, "waiting": s.total("waiting"), "ready": s.total("ready"),
            "delayed": s.total("delayed"), "leased": s.total("leased"), "dead": s.dead,
            "oldest_ready_age_ms": s.oldest_ready_age_ms,
            "shards": [{"shard": sh.shard, "waiting": sh.waiting, "ready": sh.ready,
                        "leased": sh.leased} for sh in s.shards],
            "buckets": [{"range": bucket_label(name), "label": bucket_title(name),
                         "count": s.buckets()[name]} for name, _, _ in WAITING_BUCKETS],
            "limits": limits_of(s.policy), "limited": s.limited, "paused": s.paused,
            "schedules": [schedule_fields(x) for x in s.schedules],
            "partitions": max(1, len(s.partitions)),
            "partition_stats": partition_rows(s, placements(factory, s.queue, s.policy)),
        } for s in stats]})

    async def dead(request: Request) -> JSON:
        queue = await state.topic(request.path_params["queue"])
        raw = request.query_params.get("n", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_DEAD:
            raise BadRequest(f"n must be in 1..{MAX_DEAD}, got {raw!r:.20}")
        letters = await queue.dead_letters(int(raw))
        return JSON({"queue": queue.name, "total": await queue.dead_size(), "dead": [{
            "id": d.message.id, "reason": d.reason, "deliveries": d.deliveries,
            "died_at_ms": d.died_at_ms, "last_error": d.last_error,
            "payload": d.message.payload} for d in letters]})

    async def redrive(request: Request) -> JSON:
        queue = await state.topic(request.path_params["queue"])
        doc: Any = await json_body(request, state.settings.max_body_bytes, empty={})
        ids = doc.get("ids") if isinstance(doc, dict) else None
        if ids is not None and (not isinstance(ids, list)
                                or not all(isinstance(i, str) and i for i in ids)):
            raise BadRequest("ids must be a list of message ids (or absent: all)")
        moved = await queue.redrive(ids)
        return JSON({"queue": queue.name, "redriven": moved})

    async def pause(request: Request) -> JSON:
        queue = await state.topic(request.path_params["queue"])
        if request.url.path.endswith("/pause"):
            await queue.pause()
        else:
            await queue.resume()
        return JSON({"queue": queue.name, "paused": await queue.is_paused()})

    return [
        Route("/", index, methods=["GET"]),
        Route("/api/queues", queues, methods=["GET"]),
        Route("/api/queues/{queue}/dead", dead, methods=["GET"]),
        Route("/api/queues/{queue}/redrive", redrive, methods=["POST"]),
        Route("/api/queues/{queue}/pause", pause, methods=["POST"]),
        Route("/api/queues/{queue}/resume", pause, methods=["POST"]),
    ]
