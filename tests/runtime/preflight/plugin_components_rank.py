"""One rank of ``resolver check`` whose accelerator and collective are a user's own, registered as
users register them (``runtime.register_accelerator``, ``runtime.register_collective``), in a
process someone else started (the test, with torchrun's variables). It writes what the check
reported and which of the components' methods the check called to the file its argument names.

Run by ``tests/runtime/test_preflight_plugin_components.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import attrs
import torch

import resolver
import runtime
from runtime.accelerators.cpu import CPUAccelerator
from runtime.collectives.rendezvous import Rendezvous
from runtime.collectives.torch_distributed import TorchCollective
from runtime.preflight import check_config

#: What the check called, in order: ``"accelerator.<method>"``, ``"collective.<operation>"``.
CALLS: list[str] = []


@runtime.register_accelerator("toy")
class ToyAccelerator(CPUAccelerator):
    """A device of the user's own (its memory the host's, as a test machine has)."""

    def set_device(self, device: torch.device) -> None:
        CALLS.append(f"accelerator.set_device:{device}")

    def teardown(self) -> None:
        CALLS.append("accelerator.teardown")


@runtime.register_collective("toy")
class ToyCollective(TorchCollective):
    """A collective of the user's own, on torch.distributed underneath."""

    name = "toy"
    title = "Toy"

    def setup(self, rendezvous: Rendezvous) -> None:
        CALLS.append(f"collective.setup:store={rendezvous.store is not None}")
        super().setup(rendezvous)

    def _all_reduce(self, *args: Any, **kwargs: Any) -> Any:
        CALLS.append("collective.all_reduce")
        return super()._all_reduce(*args, **kwargs)

    def _broadcast(self, *args: Any, **kwargs: Any) -> Any:
        CALLS.append("collective.broadcast")
        return super()._broadcast(*args, **kwargs)

    def _all_gather(self, *args: Any, **kwargs: Any) -> Any:
        CALLS.append("collective.all_gather")
        return super()._all_gather(*args, **kwargs)

    def _barrier(self, *args: Any, **kwargs: Any) -> Any:
        CALLS.append("collective.barrier")
        return super()._barrier(*args, **kwargs)

    def teardown(self) -> None:
        CALLS.append("collective.teardown")
        super().teardown()


def main(out: str) -> int:
    config = resolver.resolve(accelerator="cpu", devices=2)
    # The resolver's side of a new device or collective is its rules (docs/extending.md); here the
    # config names the registered components directly, as such rules would resolve them.
    config = attrs.evolve(config, accelerator="toy", collective="toy")
    report = check_config(config, timeout=60)
    checks = [(check.name, check.status, check.detail) for check in report.checks]
    with open(out, "w", encoding="utf-8") as file:
        json.dump({"ok": report.ok, "checks": checks, "calls": CALLS}, file)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
