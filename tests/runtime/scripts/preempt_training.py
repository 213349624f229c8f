"""A training loop that stops when pre-empted: ``python preempt_training.py OUT_DIR STEPS [STRATEGY]``.

With ``STRATEGY`` it calls ``runtime.launch(..., devices=2, strategy=STRATEGY)`` with the option
``preemption_signal="SIGUSR1"`` itself, catches ``runtime.PreemptedError`` and prints it as
``PREEMPTED {json}`` before exiting with its status; without, it is one rank of ``resolver run
--preemption-signal ...`` (or of a SLURM job), calling ``runtime.launch(train)``.

Each step checks ``strategy.preempted(step)``; when it says so, the ranks save
``OUT_DIR/checkpoints/step-N`` and return. At start a rank resumes from ``latest_checkpoint``. Every rank
writes into ``OUT_DIR``: ``pid-RANK`` (its process), ``progress-RANK`` (the last step it took),
``stopped-RANK`` (``{"step", "time"}`` when it stopped on pre-emption) and ``started-ATTEMPT-RANK``
(its first step and when it took it), and rank 0 ``final-ATTEMPT`` when every step is done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2])]  # the repository

import torch  # noqa: E402

import runtime  # noqa: E402


def train(strategy: runtime.Strategy, out: Path, steps: int) -> int:
    rank = strategy.global_rank
    (out / f"pid-{rank}").write_text(str(os.getpid()))
    torch.manual_seed(0)
    model, optimizer = strategy.setup_module_and_optimizer(
        torch.nn.Linear(8, 1), lambda parameters: torch.optim.SGD(parameters, lr=0.01)
    )
    state = {"model": model, "optimizer": optimizer}
    first = 0
    latest = strategy.latest_checkpoint(out / "checkpoints")
    if latest is not None:
        first = strategy.load_checkpoint(latest, state)["step"]
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    for step in range(first, steps):
        if strategy.preempted(step):
            strategy.save_checkpoint(out / "checkpoints" / f"step-{step}", {**state, "step": step})
            (out / f"stopped-{rank}").write_text(json.dumps({"step": step, "time": time.time()}))
            return step
        if step == first:
            (out / f"started-{attempt}-{rank}").write_text(json.dumps({"step": step, "time": time.time()}))
        generator = torch.Generator().manual_seed(step * 10 + rank)
        x = torch.randn(16, 8, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
        (out / f"progress-{rank}").write_text(str(step))
        time.sleep(0.01)  # a step of real work takes a while: the signal arrives mid-run
    if rank == 0:
        (out / f"final-{attempt}").write_text(str(steps))
    return steps


if __name__ == "__main__":
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3:
        try:
            runtime.launch(train, out, steps, accelerator="cpu", devices=2, strategy=sys.argv[3], timeout=120,
                           strategy_options={"preemption_signal": "SIGUSR1"})  # fmt: skip
        except runtime.PreemptedError as exc:
            report = {"step": exc.step, "checkpoint": exc.checkpoint, "message": str(exc)}
            print("PREEMPTED " + json.dumps(report), flush=True)
            sys.exit(exc.exit_code)
    else:
        runtime.launch(train, out, steps)
