"""Started by ``horovodrun -np 2 -H localhost:2 --gloo python horovodrun_train.py OUT``.

The resolver sees horovodrun's variables (cluster ``horovod``, no launcher); every rank trains;
rank 0 writes what it resolved and the training result to OUT as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project root: tests.support.horovod_workers

import resolver  # noqa: E402
import runtime  # noqa: E402
from tests.support.horovod_workers import train  # noqa: E402


def main(out: str) -> None:
    config = resolver.resolve(accelerator="cpu", devices=2, strategy="horovod")
    result = runtime.launch(_train_and_ranks, accelerator="cpu", devices=2, strategy="horovod", timeout=120)
    if config.global_rank == 0:
        result["config"] = {"strategy": config.strategy, "launcher": config.launcher,
                            "cluster_environment": config.cluster_environment,
                            "collective": config.collective, "world_size": config.world_size}  # fmt: skip
        Path(out).write_text(json.dumps(result))


def _train_and_ranks(strategy: runtime.Strategy) -> dict[str, object]:
    result = train(strategy)
    result["ranks"] = strategy.collective.all_gather_object(strategy.global_rank)
    return result


if __name__ == "__main__":
    main(sys.argv[1])
