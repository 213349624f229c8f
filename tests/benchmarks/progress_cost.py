"""What the progress watchdog costs a rank: ``python tests/benchmarks/progress_cost.py [--rounds N]``.

A launched rank records its progress into a shared-memory record (``runtime/_protocol/progress.py``);
a process without a report folder records nothing (one global read per call). Two comparisons, each
with a control (the same side twice, which says how far two identical sides differ in one run):

- ``hooks``: the calls a step and a collective make, ``progress.step()`` and the pair
  ``collective_entered``/``collective_left``, 200 000 calls per sample, with the record open (ours)
  and without (the control side, run twice), alternating, in nanoseconds per call.
- ``step``: a CPU training step of about 5 ms (an MLP, one thread, ``strategy.optimizer_step`` and an
  ``all_reduce`` of the loss through a ``ddp`` strategy of one rank), in blocks of 20 steps taking
  turns: recording (ours), not recording, not recording again (the control). Prints each side's
  median CPU time per step (the thread's, so that waiting for a core on a busy machine is not
  counted) and its difference from the unrecorded side as a share of the step.

Not a test: timings depend on the machine and its load; read each figure against its control.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import resolver  # noqa: E402
import runtime  # noqa: E402
from runtime._protocol import progress  # noqa: E402

CALLS = 200_000
BLOCK = 20


def _per_call(calls: Callable[[], None]) -> float:
    start = time.perf_counter_ns()
    calls()
    return (time.perf_counter_ns() - start) / CALLS


def _steps_only() -> None:
    step = progress.step
    for _ in range(CALLS):
        step()


def _collectives_only() -> None:
    entered, left = progress.collective_entered, progress.collective_left
    for _ in range(CALLS):
        entered("all_reduce")
        left()


def _empty_loop() -> None:
    for _ in range(CALLS):
        pass


def hooks(rounds: int, folder: str) -> None:
    for name, calls in (("progress.step()", _steps_only), ("collective_entered+left", _collectives_only)):
        ours, off, control = [], [], []
        for _ in range(rounds):
            loop = _per_call(_empty_loop)
            with progress.recording_progress(folder, 0):
                ours.append(_per_call(calls) - loop)
            off.append(_per_call(calls) - loop)
            control.append(_per_call(calls) - loop)
        print(
            f"{name}: recording {statistics.median(ours):.0f} ns/call, not recording {statistics.median(off):.0f} "
            f"ns/call, control (not recording again) {statistics.median(control):.0f} ns/call"
        )


def step_cost(rounds: int, folder: str) -> None:
    torch.set_num_threads(1)
    config = resolver.resolve(accelerator="cpu", devices=1, strategy="ddp")
    strategy = runtime.build(config)

    def work(strategy: runtime.Strategy) -> None:
        torch.manual_seed(0)
        model = strategy.setup_module(
            torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
        batch = torch.randn(128, 256)

        def block() -> float:
            start = time.thread_time()  # this thread's CPU time: waiting for a core on a busy machine is not counted
            for _ in range(BLOCK):
                loss = model(batch).square().mean()
                strategy.backward(loss)
                strategy.collective.all_reduce(loss.detach())
                strategy.optimizer_step(optimizer)
                optimizer.zero_grad()
            return (time.thread_time() - start) / BLOCK

        for _ in range(3):
            block()  # warm up
        sides: dict[str, list[float]] = {"recording": [], "not recording": [], "control": []}
        for index in range(rounds * 5):
            order = list(sides)
            order = order[index % 3 :] + order[: index % 3]  # each round starts one side further on
            for side in order:
                if side == "recording":
                    with progress.recording_progress(folder, 1):
                        sides[side].append(block())
                else:
                    sides[side].append(block())
        medians = {side: statistics.median(times) for side, times in sides.items()}
        base = medians["not recording"]
        print(f"step ({BLOCK} steps a block, {rounds * 5} blocks per side), load {os.getloadavg()[0]:.1f}:")
        for side, median in medians.items():
            print(f"  {side}: {median * 1e3:.3f} ms/step ({(median - base) / base * 100:+.2f}% vs not recording)")

    strategy.run(work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", nargs="*", choices=("hooks", "step"), default=("hooks", "step"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if "hooks" in args.only:
            hooks(args.rounds, folder)
        if "step" in args.only:
            step_cost(args.rounds, folder)


if __name__ == "__main__":
    main()
