"""A training script that resumes from its newest checkpoint: ``python resume_training.py OUT_DIR [KILL]``.

Run per rank by ``resolver run`` (``runtime.launch`` without flags), or by torchrun with
``RESUME_STRATEGY`` set (the script passes the flags itself). It trains ``EPOCHS`` epochs of
``STEPS`` steps on data fixed by (epoch, step, rank), saves a checkpoint into ``OUT_DIR/checkpoints``
after each epoch, and at start resumes from ``strategy.latest_checkpoint``. With ``KILL`` = ``E:S``,
rank 1 of the first attempt kills itself (``SIGKILL``) before step S of epoch E; with ``save:E``, the
rank that writes (rank 0; rank 1 under DeepSpeed, where every rank writes) kills itself in the
middle of writing epoch E's checkpoint, half a file written. Rank 0 writes the
final full weights to ``OUT_DIR/final.pt``; every rank writes its process id to
``OUT_DIR/pid-ATTEMPT-RANK``; the first step of each attempt and the death are timed in ``OUT_DIR``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # runtime_workers, the repository

import torch  # noqa: E402
from runtime_workers import this_process  # noqa: E402

import runtime  # noqa: E402

EPOCHS, STEPS = 3, 4


def batch(epoch: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 * epoch + 10 * step + rank)
    x = torch.randn(16, 8, generator=generator)
    return x, x @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1)


def die_while_writing(out: Path) -> None:
    """Make this rank's next ``torch.save`` write half of its bytes, then kill the rank."""
    import io

    real_save = torch.save

    def dying_save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        half = buffer.getvalue()[: len(buffer.getvalue()) // 2]
        if hasattr(f, "write"):
            f.write(half)
            f.flush()
        else:
            Path(f).write_bytes(half)  # type: ignore[arg-type]
        (out / "died").write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    torch.save = dying_save


def train(strategy: runtime.Strategy, out: Path, kill: tuple[int, int] | None) -> int:
    attempt, rank = strategy.restart_count, strategy.global_rank
    writer = 1 if strategy.config.strategy.startswith("deepspeed") else 0
    (out / f"pid-{attempt}-{rank}").write_text(this_process())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model, optimizer = strategy.setup_module_and_optimizer(
        model, lambda parameters: torch.optim.SGD(parameters, lr=0.05, momentum=0.9)
    )
    state = {"model": model, "optimizer": optimizer}
    first_epoch = 0
    latest = strategy.latest_checkpoint(out / "checkpoints")
    if latest is not None:
        first_epoch = strategy.load_checkpoint(latest, state)["epoch"] + 1
    for epoch in range(first_epoch, EPOCHS):
        for step in range(STEPS):
            if kill == (epoch, step) and attempt == 0 and rank == 1:
                (out / "died").write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = strategy.to_device(batch(epoch, step, rank))
            loss = torch.nn.functional.mse_loss(model(x), y)
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            optimizer.zero_grad()
            if rank == 0 and not (out / f"first-step-{attempt}").exists():
                (out / f"first-step-{attempt}").write_text(repr(time.time()))
        if kill == (-1, epoch) and attempt == 0 and rank == writer:
            die_while_writing(out)
        strategy.save_checkpoint(out / "checkpoints" / f"epoch-{epoch}", {**state, "epoch": epoch})
    weights = strategy.full_state_dict(model)
    if rank == 0:
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, out / "final.pt")
    return attempt


if __name__ == "__main__":
    out = Path(sys.argv[1])
    kill = tuple(int(part) for part in sys.argv[2].replace("save", "-1").split(":")) if len(sys.argv) > 2 else None
    flags = os.environ.get("RESUME_STRATEGY")
    if flags:  # under torchrun: the script says what to run
        runtime.launch(train, out, kill, accelerator="cpu", devices=2, strategy=flags)
    else:  # under resolver run: what its command line said
        runtime.launch(train, out, kill)
