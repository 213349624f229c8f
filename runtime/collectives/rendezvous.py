"""``Rendezvous``: the one value :meth:`Collective.setup <runtime.collectives.base.Collective.setup>` takes.

Who this process is in the group, where the group meets, and how long the meeting and each later
operation may take; a collective whose engine has a rendezvous of its own (Horovod's runner,
XLA's PJRT) reads only what it needs and checks the ranks against its engine's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import torch

from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout

__all__ = ["Rendezvous"]


@attrs.frozen(kw_only=True)
class Rendezvous:
    """How this process joins its collective: ``rank`` of ``world_size`` processes meeting at
    ``master_addr:master_port`` over ``backend``.

    ``timeout`` (seconds or a timedelta) bounds every operation; ``rendezvous_timeout`` (seconds)
    bounds the wait for every rank to join (``None``: ``RUNTIME_RENDEZVOUS_TIMEOUT``, else 300; a
    collective without a rendezvous of its own ignores it); ``device`` is the device this process's
    tensors live on (some backends need it); ``store``: a key-value store the ranks have already met
    in (``resolver check``'s), which a collective that meets in a store joins through instead of
    opening one at ``master_addr:master_port`` (one with a rendezvous of its own ignores it).
    """

    rank: int
    world_size: int
    backend: str | None = None
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    timeout: timedelta | float | None = attrs.field(default=None)
    device: torch.device | None = None
    rendezvous_timeout: float | None = attrs.field(default=None)
    store: Any = None

    @timeout.validator
    @rendezvous_timeout.validator
    def _check_timeout(self, attribute: attrs.Attribute[Any], value: timedelta | float | None) -> None:
        if value is None:
            return
        seconds = value.total_seconds() if isinstance(value, timedelta) and attribute.name == "timeout" else value
        hint = TIMEOUT_HINTS["rendezvous_timeout" if attribute.name == "rendezvous_timeout" else "collective"]
        check_timeout(seconds, f"Rendezvous({attribute.name}={value!r})", hint)
