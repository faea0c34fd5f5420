"""kombu's names this package builds on, typed as ``Any``.

kombu ships partial type hints only: its virtual transport's methods are untyped, so a
subclass under ``mypy --strict`` would be an error per call. Importing them through here
keeps the package strictly typed everywhere else.
"""

from __future__ import annotations

from typing import Any

from kombu.exceptions import ChannelError as _ChannelError
from kombu.exceptions import ConnectionError as _ConnectionError
from kombu.transport import TRANSPORT_ALIASES as _ALIASES
from kombu.transport import virtual as _virtual
from kombu.utils import json as _json

VirtualChannel: Any = _virtual.Channel
VirtualQoS: Any = _virtual.QoS
VirtualTransport: Any = _virtual.Transport
ChannelError: Any = _ChannelError
KombuConnectionError: Any = _ConnectionError
TRANSPORT_ALIASES: dict[str, Any] = _ALIASES
dumps: Any = _json.dumps
loads: Any = _json.loads
