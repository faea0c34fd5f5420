"""The dashboard page at ``/`` and the JSON it reads (``/api/...``)."""

from __future__ import annotations

from starlette.routing import Route

from .state import ServerState


def routes(state: ServerState) -> list[Route]:
    """The dashboard's routes over ``state``."""
    return []
