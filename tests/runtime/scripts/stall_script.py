"""Training whose rank 1 gets stuck in plain Python at step 40, with no ``timeout`` set.

``python stall_script.py LAUNCHER OUT_DIR KIND [OPTIONS_JSON]``: LAUNCHER is ``ddp``, ``ddp_spawn`` or
``ddp_fork`` (the script launches) or ``run`` (``resolver run`` started it: ``runtime.launch()`` without
flags). KIND is ``stuck`` (rank 1 loops forever at step 40), ``healthy`` (every rank runs 60 steps),
``slow-stuck`` (steps of 0.3 s, then rank 1 stuck at step 12: the deadline comes from the step time),
``heartbeat`` (at step 10 every rank spends 4 s in a loop of ``strategy.heartbeat()`` only) or
``pause`` (at step 10 every rank sleeps 4 s, with no step, collective or heartbeat) or ``slow-save`` (at
step 10 a checkpoint is saved whose writing takes 4 s) or ``mismatch`` (steps of 0.3 s; at step 12 rank 1
broadcasts its first gradient where rank 0 all-reduces it: the ranks wait in different collectives).
OPTIONS_JSON are strategy options (e.g. ``{"progress_timeout": 2}``). The launching process prints one
``OUTCOME {json}`` line: the error type, its ranks and message, and the seconds it took.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # runtime_workers, the repository

import torch  # noqa: E402
from runtime_workers import record_pid, wait_for_pids  # noqa: E402

import runtime  # noqa: E402


class SlowToWrite:
    """A checkpoint entry that takes 4 s to write (a large checkpoint on a slow disk)."""

    def __getstate__(self) -> dict[str, object]:
        time.sleep(4.0)
        return {}


def train(strategy: runtime.Strategy, kind: str, out: str) -> str:
    record_pid(Path(out), strategy)
    wait_for_pids(Path(out), strategy.world_size)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    stuck_at, pause = {"stuck": (40, 0.0), "slow-stuck": (12, 0.3), "mismatch": (None, 0.3)}.get(kind, (None, 0.0))
    for step in range(60):
        if step == stuck_at and strategy.global_rank == 1:
            while True:  # stuck in plain Python: no collective, no step, no exception
                pass
        if step == 10 and kind in ("heartbeat", "pause"):
            end = time.monotonic() + 4.0
            while time.monotonic() < end:  # evaluation, say: no step, no collective
                time.sleep(0.05)
                if kind == "heartbeat":
                    strategy.heartbeat()
        if step == 10 and kind == "slow-save":
            strategy.save_checkpoint(Path(out) / "slow.ckpt", {"model": model, "slow": SlowToWrite()})
        time.sleep(pause)
        loss = model(torch.ones(2, 4)).square().mean()
        loss.backward()
        for parameter in model.parameters():
            assert parameter.grad is not None
            if kind == "mismatch" and step == 12 and strategy.global_rank == 1:
                strategy.collective.broadcast(parameter.grad, src=1)  # where rank 0 runs its all_reduce
            strategy.collective.all_reduce(parameter.grad, op="mean")
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
    return "done"


def main() -> None:
    launcher, out, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    start = time.monotonic()
    outcome: dict[str, object] = {}
    try:
        if launcher == "run":
            runtime.launch(train, kind, out)
        else:
            runtime.launch(train, kind, out, devices=2, strategy=launcher, strategy_options=options)
        outcome = {"error": None}
    except Exception as error:
        outcome = {"error": type(error).__name__, "ranks": list(getattr(error, "ranks", ())), "message": str(error)}
        if launcher == "run":
            raise
    outcome["seconds"] = round(time.monotonic() - start, 2)
    if launcher != "run":
        print("OUTCOME " + json.dumps(outcome) + "\n", end="", flush=True)


if __name__ == "__main__":  # ddp_spawn imports this file again in each rank
    main()
