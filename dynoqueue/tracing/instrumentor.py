"""``opentelemetry-instrument`` support: :class:`DynoqueueInstrumentor`, registered as the
``dynoqueue`` entry point of the ``opentelemetry_instrumentor`` group, so auto-instrumentation
traces dynoqueue like the libraries it ships instrumentations for.

Needs ``opentelemetry-instrumentation`` (which provides ``opentelemetry-instrument``); the rest
of :mod:`dynoqueue.tracing` needs only ``opentelemetry-api``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from . import instrument, uninstrument


class DynoqueueInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """``DynoqueueInstrumentor().instrument(tracer_provider=..., propagator=...,
    process_parent=..., empty_receives=..., create_spans=...)``: the arguments and effect of
    :func:`dynoqueue.tracing.instrument`, in the form every OpenTelemetry instrumentation has;
    ``uninstrument()`` undoes it."""

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: dynoqueue instruments itself, so the installed version always matches."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        instrument(tracer_provider=kwargs.get("tracer_provider"),
                   propagator=kwargs.get("propagator"),
                   process_parent=kwargs.get("process_parent", "link"),
                   empty_receives=kwargs.get("empty_receives", False),
                   create_spans=kwargs.get("create_spans", True))

    def _uninstrument(self, **kwargs: Any) -> None:
        uninstrument()
