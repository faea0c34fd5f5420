"""dynoqueue as a kombu transport, so a Celery app moves to dynoqueue with one line.

Either import this package, which registers the URL schemes with kombu, and use a
``dynoqueue`` URL::

    import dynoqueue.kombu  # registers dynoqueue://, dynoqueues://, dynoqueue+sentinel://, ...
    app = Celery("tasks", broker="dynoqueue://localhost:6379/0")

or name the transport without importing it::

    app.conf.broker_transport = "dynoqueue.kombu:Transport"
    app.conf.broker_url = "dynoqueue://localhost:6379/0"

``broker_transport_options`` are checked by
:func:`~dynoqueue.kombu.options.parse_options`; see ``docs/celery.md``. Needs the ``celery``
extra (kombu).
"""

from __future__ import annotations

from ._kombu import TRANSPORT_ALIASES
from .channel import Channel
from .options import KNOWN_OPTIONS, TransportOptions, parse_options
from .qos import QoS
from .transport import Transport
from .urls import SCHEMES

__all__ = ["KNOWN_OPTIONS", "SCHEMES", "Channel", "QoS", "Transport", "TransportOptions",
           "parse_options", "register"]

#: What kombu's alias table maps each scheme to (kombu splits ``dynoqueue+sentinel`` at the
#: ``+`` and looks up ``dynoqueue``).
TRANSPORT_PATH = "dynoqueue.kombu:Transport"


def register() -> None:
    """Register the ``dynoqueue`` and ``dynoqueues`` schemes in kombu's transport aliases
    (idempotent; importing this package does it)."""
    for scheme in SCHEMES:
        TRANSPORT_ALIASES.setdefault(scheme.partition("+")[0], TRANSPORT_PATH)


register()
