"""Side-by-side: this project's warm resolve() against PyTorch Lightning's ``_AcceleratorConnector``.

Lightning 2.x installs beside the project's tests with the ``bench`` extra (install torch first, so
that pip keeps it; README.md here)::

    pip install -e '.[bench]'
    python tests/benchmarks/compare_lightning.py [--snapshot same new probe] [--code /other/checkout]

Both run in one process, interleaved round by round, so a busy machine slows both alike; the
medians, their spread (lowest-highest round) and their ratio are printed. No resolve() result is
cached between calls. Three ways of calling resolve() are timed (``--snapshot``):

* ``same``: the same snapshot (``Environment()``) on every call;
* ``new``: a snapshot never seen before on every call (simulation sweeps, golden runs, each worker
  process), made before the timed round: each differs in its host name, which no answer depends on;
* ``probe``: ``resolve()`` as users call it, probing the machine (``Environment.probe()``) on every
  call, as Lightning's connector detects the machine on every construction.

``--code DIR`` imports ``resolver`` from another checkout (e.g. the main branch's, to measure a
change's before and after in one session: alternate the two, each with Lightning as its control).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cases import CASES, LIGHTNING_DEFAULTS, warm_runs  # noqa: E402

SNAPSHOTS = ("same", "new", "probe")


def _lightning() -> tuple[str, Any]:
    try:
        from pytorch_lightning import __version__
        from pytorch_lightning.trainer.connectors.accelerator_connector import _AcceleratorConnector
    except ImportError:
        from lightning import __version__
        from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
    return __version__, _AcceleratorConnector


def _spread(times: list[float]) -> str:
    return f"{statistics.median(times):.1f} ({min(times):.1f}-{max(times):.1f})"


def main(snapshots: tuple[str, ...] = SNAPSHOTS, rounds: int = 15, number: int = 300) -> None:
    import resolver

    version, connector = _lightning()
    logging.disable(logging.INFO)  # Lightning logs its precision choice on every construction
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(
        f"resolver from {Path(resolver.__file__).parent.parent}; pytorch_lightning {version}, Python "
        f"{sys.version.split()[0]}; median (lowest-highest) of {rounds} rounds of {number} calls, "
        f"process CPU time; load average {load}"
    )
    print(f"{'snapshot':<9}{'case':<20}{'resolve() µs':>24}{'Lightning µs':>24}{'ratio':>8}")
    same = resolver.Environment()
    for mode in snapshots:
        for name, (flags, pl_flags) in CASES.items():
            arguments = {**LIGHTNING_DEFAULTS, **pl_flags}
            if mode == "same":
                ours = lambda flags=flags: resolver.resolve(**flags, environment=same)  # noqa: E731
            elif mode == "new":
                pool: list[Any] = []  # refilled before each round; each call takes a snapshot out

                def ours(flags: dict[str, Any] = flags, pool: list[Any] = pool) -> Any:
                    return resolver.resolve(**flags, environment=pool.pop())
            else:
                ours = lambda flags=flags: resolver.resolve(**flags)  # noqa: E731
            theirs = lambda arguments=arguments: connector(**arguments)  # noqa: E731
            warm = warm_runs()
            if mode == "new":
                pool[:] = [resolver.Environment(hostname=f"warm{i}") for i in range(warm)]
            for _ in range(warm):  # warm: resolve() has generated its code
                ours()
            theirs()
            a, b = [], []
            # CPU time of this process: time spent waiting for a core on a busy machine is not counted.
            timer_ours = timeit.Timer(ours, timer=time.process_time)
            timer_theirs = timeit.Timer(theirs, timer=time.process_time)
            counter = itertools.count()
            for _ in range(rounds):
                if mode == "new":  # snapshots never seen before, made outside the timed calls
                    pool[:] = [resolver.Environment(hostname=f"n{next(counter)}") for _ in range(number)]
                a.append(timer_ours.timeit(number=number) / number * 1e6)
                b.append(timer_theirs.timeit(number=number) / number * 1e6)
            ratio = statistics.median(b) / statistics.median(a)
            print(f"{mode:<9}{name:<20}{_spread(a):>24}{_spread(b):>24}{ratio:>7.2f}x", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--snapshot", nargs="+", choices=SNAPSHOTS, default=list(SNAPSHOTS))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[2]), help="checkout to import from")
    args = parser.parse_args()
    sys.path.insert(0, args.code)
    main(tuple(args.snapshot), args.rounds, args.number)
