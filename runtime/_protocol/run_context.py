"""What ``resolver run`` tells the ranks it starts beyond their config: what it resolved from.

A rank of ``resolver run`` runs a script whose ``launch()`` may name flags the command line left at
their default (``launch(train, devices=2, strategy="ddp")`` under ``resolver run --nproc-per-node 2``).
Those take the script's values, as a flags file's would: the rank resolves the command line's flags
with the script's added against the same machine snapshot and rule files ``resolver run`` used, so
every rank reaches the same config (:mod:`runtime._rank.script_flags`). The context also carries
``resolver run``'s ``--max-restarts``, which a ``launch(max_restarts=N)`` must agree with. A rank
that a launcher of the runtime started (the subprocess launcher re-running ``python train.py``) has
no context: its config came from the script's own ``launch()`` already.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["RUN_CONTEXT_VARIABLE", "RunContext"]

#: ``resolver run``'s context, as JSON, in every rank it starts.
RUN_CONTEXT_VARIABLE = "RESOLVER_RUN_CONTEXT"


@attrs.frozen
class RunContext:
    """The machine snapshot (``Environment.to_dict()``) and rule files ``resolver run`` resolved with,
    and its ``--max-restarts``."""

    environment: Mapping[str, Any]
    rules: tuple[str, ...] = ()
    max_restarts: int = 0

    def to_json(self) -> str:
        data = {"environment": dict(self.environment), "rules": list(self.rules), "max_restarts": self.max_restarts}
        return json.dumps(data)

    @classmethod
    def of(cls, environment: Any, rules: Sequence[str], max_restarts: int) -> RunContext:
        """The context of a run resolved against ``environment`` (a ``resolver.Environment``)."""
        return cls(environment.to_dict(), tuple(os.path.abspath(path) for path in rules), max_restarts)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RunContext | None:
        """This rank's context, or ``None`` when ``resolver run`` did not start it (or the variable is unreadable,
        which only someone who set it by hand can cause: the rank then runs as its config says)."""
        text = (os.environ if environ is None else environ).get(RUN_CONTEXT_VARIABLE)
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(dict(data["environment"]), tuple(data["rules"]), int(data["max_restarts"]))
        except (ValueError, TypeError, KeyError):
            return None
