"""Side-by-side: this project's warm resolve() against PyTorch Lightning's ``_AcceleratorConnector``.

Lightning cannot be installed beside the project's test environment without pulling another torch,
so this runs in a throwaway virtual environment that has both (see README.md here)::

    python3 -m venv /tmp/pl && /tmp/pl/bin/pip install torch==2.13.0 && /tmp/pl/bin/pip install \\
        pytorch_lightning attrs cattrs networkx tomli_w
    /tmp/pl/bin/python tests/benchmarks/compare_lightning.py

Both run in one process, interleaved round by round, so a busy machine slows both alike; the
medians and their ratio are printed. No resolve() result is cached between calls.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_cases import CASES, LIGHTNING_DEFAULTS  # noqa: E402
from pytorch_lightning import __version__ as lightning_version  # noqa: E402
from pytorch_lightning.trainer.connectors.accelerator_connector import _AcceleratorConnector  # noqa: E402

import resolver  # noqa: E402


def main(rounds: int = 15, number: int = 300) -> None:
    logging.disable(logging.INFO)  # Lightning logs its precision choice on every construction
    env = resolver.Environment()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(
        f"pytorch_lightning {lightning_version}, Python {sys.version.split()[0]}; median of {rounds} rounds "
        f"of {number} calls, process CPU time; load average {load}"
    )
    print(f"{'case':<20}{'resolve() µs':>14}{'Lightning µs':>14}{'ratio':>8}")
    for name, (flags, pl_flags) in CASES.items():
        arguments = {**LIGHTNING_DEFAULTS, **pl_flags}
        ours = lambda flags=flags: resolver.resolve(**flags, environment=env)  # noqa: E731
        theirs = lambda arguments=arguments: _AcceleratorConnector(**arguments)  # noqa: E731
        ours(), ours(), theirs()  # warm: resolve() generates its code on the second run
        a, b = [], []
        # CPU time of this process: time spent waiting for a core on a busy machine is not counted.
        timer_ours = timeit.Timer(ours, timer=time.process_time)
        timer_theirs = timeit.Timer(theirs, timer=time.process_time)
        for _ in range(rounds):
            a.append(timer_ours.timeit(number=number) / number * 1e6)
            b.append(timer_theirs.timeit(number=number) / number * 1e6)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:<20}{ma:>14.1f}{mb:>14.1f}{mb / ma:>7.2f}x")


if __name__ == "__main__":
    main()
