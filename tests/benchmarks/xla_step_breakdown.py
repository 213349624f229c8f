"""Where the runtime's XLA step spends its time over torch_xla's own loop:
``python tests/benchmarks/xla_step_breakdown.py [--rounds N]`` (the torch_xla environment's python,
``PJRT_DEVICE=CPU``).

In one replica at world size 1, these steps take turns in blocks of 5 (``runtime_speed._interleaved_rates``),
each timed block ended by ``xm.wait_device_ops()``:

- ``raw, loss kept``: the reference, torch_xla's own loop keeping ``loss`` until its sync
  (``xm.optimizer_step(optimizer, barrier=True)``), as the runtime's step does;
- ``raw, loss let go``: the same, letting the loss go after ``backward`` (one tensor fewer out of
  every graph);
- ``precision alone``: the strategy's precision's ``forward_context``/``backward``/``optimizer_step``
  called directly (the call layers without the strategy and its misuse checks);
- ``runtime``: the runtime's step as ``docs/runtime.md`` writes it;
- ``control``: the reference again.

Each line: the median of the round-by-round differences from the reference in the main thread's
CPU µs per step, with its interquartile range, and the ratio of the steps/s medians. Then what
torch_xla counted over a few steps of the runtime's step and of the reference (the graph each runs).
Not a test: see README.md in this folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runtime_speed as speed  # noqa: E402

import runtime  # noqa: E402


def _steps(strategy: runtime.Strategy, x: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], None]]:
    import torch_xla.core.xla_model as xm

    def set_up() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        return strategy.setup_module_and_optimizer(speed._model(), lambda p: torch.optim.SGD(p, lr=0.01))

    def raw(keep: bool) -> Callable[[], None]:
        model, optimizer = set_up()

        def kept() -> None:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer, barrier=True)
            optimizer.zero_grad()

        def let_go() -> None:
            torch.nn.functional.mse_loss(model(x), y).backward()
            xm.optimizer_step(optimizer, barrier=True)
            optimizer.zero_grad()

        return kept if keep else let_go

    def precision_alone() -> Callable[[], None]:
        model, optimizer = set_up()
        precision = strategy.precision

        def step() -> None:
            with precision.forward_context():
                loss = torch.nn.functional.mse_loss(model(x), y)
            precision.backward(loss)
            precision.optimizer_step(optimizer)
            optimizer.zero_grad()

        return step

    return {
        "raw, loss kept": raw(True),
        "raw, loss let go": raw(False),
        "precision alone": precision_alone(),
        "runtime": speed._runtime_step(strategy, x, y),
        "control": raw(True),
    }


def breakdown(strategy: runtime.Strategy, rounds: int) -> tuple[list[str], speed.Rounds, speed.Rounds, list[str]]:
    import torch_xla.core.xla_model as xm

    x, y = speed._batch(strategy.to_device)
    steps = _steps(strategy, x, y)
    rates, cpus = speed._interleaved_rates(rounds, *steps.values(), sync=xm.wait_device_ops)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root
    from tests.support.xla_workers import graph_counts  # what the XLA tests count, counted the same way

    counts = [
        f"{name}: {graph_counts(steps[name], 10, warm=0)} over 10 steps" for name in ("runtime", "raw, loss kept")
    ]
    return list(steps), rates, cpus, counts


def _quartiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4], ordered[(3 * (len(ordered) - 1)) // 4]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41, help="timed rounds (default: %(default)s)")
    args = parser.parse_args()
    names, rates, cpus, counts = runtime.launch(breakdown, args.rounds, accelerator="xla", devices=1, strategy="xla")
    print(
        f"xla step breakdown: {args.rounds} rounds of {speed.STEPS_PER_ROUND} steps per side, in blocks of "
        f"{speed.STEPS_PER_BLOCK}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for index, name in enumerate(names):
        extra = [cpu - ref for cpu, ref in zip(cpus[index], cpus[0], strict=True)]
        low, high = _quartiles(extra)
        print(
            f"  {name:<18} {statistics.median(cpus[index]):7.1f} us CPU per step, "
            f"{statistics.median(extra):+6.1f} us over raw, loss kept (IQR {low:+.1f}..{high:+.1f}); "
            f"steps/s ratio {statistics.median(rates[index]) / statistics.median(rates[0]):.3f}",
            flush=True,
        )
    for line in counts:
        print(f"  torch_xla counted, {line}", flush=True)


if __name__ == "__main__":
    main()
