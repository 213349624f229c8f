"""The flag sets the engine benchmarks time, each with the Lightning ``_AcceleratorConnector``
arguments that mean the same on a CPU-only machine (where the comparison runs)."""

from __future__ import annotations

from typing import Any

#: name -> (resolve() flags, Lightning connector flags)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "laptop-default": ({}, {}),
    "cpu-ddp-2": ({"devices": 2, "strategy": "ddp"}, {"devices": 2, "strategy": "ddp"}),
    "cpu-explicit-bf16": (
        {"accelerator": "cpu", "devices": 1, "precision": "bf16-mixed"},
        {"accelerator": "cpu", "devices": 1, "precision": "bf16-mixed"},
    ),
}


def warm_runs() -> int:
    """How many resolutions warm a table up: the closures' runs, then the one that generates its
    code (``resolver._engine.evaluator.GENERATE_AFTER``; a checkout from before it was named, as
    ``--code`` may import, generated on the second run)."""
    from resolver._engine import evaluator

    return getattr(evaluator, "GENERATE_AFTER", 1) + 1


LIGHTNING_DEFAULTS: dict[str, Any] = {
    "devices": "auto",
    "num_nodes": 1,
    "accelerator": "auto",
    "strategy": "auto",
    "plugins": None,
    "precision": None,
    "sync_batchnorm": False,
    "benchmark": None,
    "use_distributed_sampler": True,
    "deterministic": None,
}


def inert_rules(count: int) -> str:
    """``count`` rules that never fire (each reads its own unset variable): the table grows, the answer does not."""
    parts = []
    for i in range(count):
        parts.append(
            f'[[rule]]\nid = "inert.{i}"\nstage = "placed"\n'
            f'when = {{ "var.INERT_{i}" = {{ set = true }}, num_devices = {{ gt = 0 }} }}\n'
            f'note = "inert rule {i} fired"\n'
        )
    return "\n".join(parts)
