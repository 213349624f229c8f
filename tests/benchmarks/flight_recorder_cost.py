"""What torch's flight recorder costs a collective: ``python tests/benchmarks/flight_recorder_cost.py [--rounds N]``.

The launcher gives each rank ``TORCH_FR_BUFFER_SIZE=2000`` (torch 2.13's own default) so that the launcher
can read the record of a hung rank (``runtime/_protocol/flight_recorder.py``). torch reads the size once,
when a process group is made, so each side is its own process: a one-rank gloo group running
``all_reduce`` of 4 floats, ``--calls`` per sample, CPU time of the calling thread per call (waiting for a
core on a busy machine is not counted). The sides take turns: recording (2000 entries), not recording
(0), not recording again (the control, which says how far two identical sides differ in one run).
Prints each side's median and the difference from the unrecorded side, also as a share of a 5 ms step
with one collective.

Not a test: timings depend on the machine and its load; read each figure against its control.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SIDES = (("recording", "2000"), ("not recording", "0"), ("control", "0"))
STEP_SECONDS = 0.005

WORKER = """
import json, os, sys, time
import torch, torch.distributed as dist
from torch._C import _distributed_c10d as c10d
calls = int(sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1, init_method="tcp://127.0.0.1:0")
tensor = torch.ones(4)
for _ in range(200):
    dist.all_reduce(tensor)
start = time.thread_time()
for _ in range(calls):
    dist.all_reduce(tensor)
per_call = (time.thread_time() - start) / calls
recorded = len(json.loads(c10d._dump_fr_trace_json()).get("entries", []))
dist.destroy_process_group()
print(json.dumps({"per_call": per_call, "recorded": recorded}))
"""


def _sample(size: str, calls: int) -> tuple[float, int]:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": size, "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)
    done = subprocess.run([sys.executable, "-c", WORKER, str(calls)], capture_output=True, text=True, env=env,
                          timeout=300, check=True)  # fmt: skip
    figures = json.loads(done.stdout.splitlines()[-1])
    return figures["per_call"], figures["recorded"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="samples of each side, taking turns (default 7)")
    parser.add_argument("--calls", type=int, default=5000, help="all_reduce calls per sample (default 5000)")
    options = parser.parse_args(argv)
    samples: dict[str, list[float]] = {name: [] for name, _ in SIDES}
    recorded: dict[str, int] = {}
    for _ in range(options.rounds):
        for name, size in SIDES:
            per_call, recorded[name] = _sample(size, options.calls)
            samples[name].append(per_call)
    base = statistics.median(samples["not recording"])
    for name, _ in SIDES:
        median = statistics.median(samples[name])
        extra = median - base
        print(f"{name}: {median * 1e6:.2f} µs CPU per all_reduce (median of {options.rounds}), "
              f"{extra * 1e6:+.2f} µs against not recording, {extra / STEP_SECONDS:+.4%} of a 5 ms step "
              f"with one collective; entries in the record: {recorded[name]}")  # fmt: skip


if __name__ == "__main__":
    main()
