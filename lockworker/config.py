"""Checks of constructor arguments shared by every product, and the default owner id.

A leaf module: each check raises :class:`~lockworker.errors.InvalidConfig` naming the
argument and the rule, before any Redis call.
"""

from __future__ import annotations

import math
import os
import socket
import uuid

from lockworker.errors import InvalidConfig


def default_owner() -> str:
    """``host:pid:random``: unique per object, readable in logs and status."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def positive(value: object, name: str, *, integer: bool = False) -> float:
    """``value`` as a float if it is a finite number > 0 (an int >= 1 with ``integer``)."""
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    expected = "an int >= 1" if integer else "a finite number of seconds > 0"
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise InvalidConfig(f"{name} must be {expected}, got {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if (integer and number < 1) or (not integer and not 0 < number < math.inf):
        raise InvalidConfig(f"{name} must be {expected}, got {value!r}")
    return number
