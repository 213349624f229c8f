"""Engine parity: ``python tests/benchmarks/engine_parity.py [--rounds N] [--engines ...]``.

A training step through the runtime against the same step written with the engine's own API, in
the same ranks, taking turns in blocks (``runtime_speed._interleaved_rates``), beside a control
(the raw step run twice: how far two identical sides differ in this run). Each line gives the ratio
of medians and the median of round-by-round ratios, in steps/s and in the main thread's CPU time per
step; >= 1.0 means the runtime is at least as fast as raw. The engines:

- ``deepspeed2`` / ``deepspeed3``: ``deepspeed_stage_2`` / ``deepspeed_stage_3`` on 2 CPU ranks
  against ``deepspeed.initialize`` with the very config the runtime generated (the runtime's
  ``strategy.deepspeed_config``), then ``engine.backward`` / ``engine.step``.
- ``horovod``: ``horovod`` on 2 ranks started by ``horovodrun --gloo`` (this script starts it and
  re-runs itself under it) against ``hvd.broadcast_parameters`` + ``hvd.DistributedOptimizer``.
- ``xla``: ``xla`` at world size 1 on XLA:CPU (``PJRT_DEVICE=CPU``, in the torch_xla environment)
  against a raw loop with ``xm.optimizer_step(optimizer, barrier=True)``; every timed block ends
  with ``xm.wait_device_ops()`` so queued device work is counted where it was issued.

An engine that is not installed prints a ``skipped`` line saying so. Not a test: read each ratio
against its control (see README.md in this folder).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runtime_speed as speed  # noqa: E402

import runtime  # noqa: E402

ENGINES = ("deepspeed2", "deepspeed3", "horovod", "xla")


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


def deepspeed_steps(strategy: runtime.Strategy, rounds: int) -> tuple[speed.Rounds, speed.Rounds]:
    """In each rank: the runtime's step, then two raw ``deepspeed.initialize`` engines built from
    the config the runtime generated (the same ZeRO stage, batch size and precision)."""
    import deepspeed

    x, y = speed._batch(strategy.to_device)
    config = copy.deepcopy(strategy.deepspeed_config)  # type: ignore[attr-defined]

    def raw_step() -> Any:
        model = speed._model()
        engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), config=copy.deepcopy(config)
        )

        def raw() -> None:
            engine.backward(_loss(engine, x, y))
            engine.step()

        return raw

    return speed._interleaved_rates(rounds, speed._runtime_step(strategy, x, y), raw_step(), raw_step())


def horovod_steps(strategy: runtime.Strategy, rounds: int) -> tuple[speed.Rounds, speed.Rounds]:
    """In each horovodrun rank: the runtime's step, then two raw Horovod loops (parameters broadcast
    from rank 0, ``DistributedOptimizer`` averaging the gradients, as Horovod's own examples do)."""
    import horovod.torch as hvd

    x, y = speed._batch(strategy.to_device)

    def raw_step() -> Any:
        model = speed._model()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)

        def raw() -> None:
            _loss(model, x, y).backward()
            optimizer.step()
            optimizer.zero_grad()

        return raw

    return speed._interleaved_rates(rounds, speed._runtime_step(strategy, x, y), raw_step(), raw_step())


def xla_steps(strategy: runtime.Strategy, rounds: int) -> tuple[speed.Rounds, speed.Rounds]:
    """On the XLA device: the runtime's step, then two raw torch_xla loops doing what the runtime's
    XLA precision does at world size 1 (``xm.optimizer_step`` with a barrier ends the step's graph)."""
    import torch_xla.core.xla_model as xm

    x, y = speed._batch(strategy.to_device)

    def raw_step() -> Any:
        model = speed._model().to(x.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        def raw() -> None:
            # The loss stays referenced until the step's sync, as in the runtime's step (and in any loop
            # that logs it): a live tensor at the sync is one more output of the step's graph on XLA.
            loss = _loss(model, x, y)
            loss.backward()
            xm.optimizer_step(optimizer, barrier=True)
            optimizer.zero_grad()

        return raw

    return speed._interleaved_rates(
        rounds, speed._runtime_step(strategy, x, y), raw_step(), raw_step(), sync=xm.wait_device_ops
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _skip(engine: str, why: str) -> None:
    print(f"{'step ' + engine:<44} skipped: {why}", flush=True)


def run_horovod(rounds: int) -> None:
    """Start 2 ranks under ``horovodrun --gloo`` running this script's ``--inside-horovodrun`` part;
    rank 0 prints the report."""
    horovodrun = shutil.which("horovodrun") or str(Path(sys.executable).with_name("horovodrun"))
    if not Path(horovodrun).exists():
        _skip("horovod", "horovodrun is not on PATH (build Horovod: scripts/build-horovod.sh)")
        return
    command = [horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, __file__,
               "--inside-horovodrun", "--rounds", str(rounds)]  # fmt: skip
    done = subprocess.run(command, timeout=600, check=False)
    if done.returncode:
        print(f"{'step horovod':<44} failed: horovodrun exited {done.returncode}", flush=True)


def inside_horovodrun(rounds: int) -> None:
    rates = runtime.launch(horovod_steps, rounds, accelerator="cpu", devices=2, strategy="horovod", timeout=600)
    if os.environ.get("HOROVOD_RANK") == "0":  # every rank gets its own figures under horovodrun
        speed.report_steps("step horovod x2 (horovodrun --gloo)", *rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="timed rounds per engine (default: %(default)s)")
    parser.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--inside-horovodrun", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside_horovodrun:
        inside_horovodrun(args.rounds)
        return
    print(
        f"torch {torch.__version__}, {speed._cores()} core(s); {args.rounds} rounds of {speed.STEPS_PER_ROUND} "
        f"steps per side, in blocks of {speed.STEPS_PER_BLOCK}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for engine in args.engines:
        if engine.startswith("deepspeed"):
            if not _installed("deepspeed"):
                _skip(engine, "deepspeed is not installed (the CI's DeepSpeed phase installs it)")
                continue
            stage = engine[-1]
            speed.report_steps(
                f"step deepspeed ZeRO {stage} x2",
                *speed._in_ranks(f"deepspeed_stage_{stage}", deepspeed_steps, args.rounds),
            )
        elif engine == "horovod":
            if not _installed("horovod.torch"):
                _skip(engine, "horovod is not installed (scripts/build-horovod.sh builds it)")
                continue
            run_horovod(args.rounds)
        elif engine == "xla":
            if not _installed("torch_xla"):
                _skip(engine, "torch_xla is not installed (it lives in the XLA environment: .ci/xla-env.sh)")
                continue
            rates = runtime.launch(xla_steps, args.rounds, accelerator="xla", devices=1, strategy="xla")
            speed.report_steps("step xla x1 (XLA:CPU)", *rates)


if __name__ == "__main__":
    main()
