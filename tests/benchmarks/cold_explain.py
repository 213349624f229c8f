"""A cold ``resolver explain --devices 2 --strategy ddp`` process against ``python -c pass``, and
where its time goes. Not a test: prints medians, differences and ratios.

    python tests/benchmarks/cold_explain.py [--rounds 15]

Every command runs once per round, interleaved, with byte code cached (``PYTHONPYCACHEPREFIX``,
``PYTHONDONTWRITEBYTECODE`` unset) and a warm compiled-table cache, both in a fresh temporary
folder filled by two warm-up rounds. Each figure is the median of the wall time and of the
process's CPU time (user + system; on a busy machine, time spent waiting for a core is not in it).
The steps between the commands give the breakdown: the interpreter, ``import attrs`` (which
``resolver.operators`` needs), the rest of ``import resolver.cli``, and the command's own work
(parsing, loading the table, probing, resolving, printing); ``--phases`` also times that work
inside one process, phase by phase.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

FLAGS = ("explain", "--devices", "2", "--strategy", "ddp")

_PHASES = r"""
import time
started = time.perf_counter()
import resolver.cli as cli
import resolver.cli_parser as cli_parser
from resolver import api
from resolver.environment import Environment
from resolver.explain import explain_text
marks = {"import resolver.cli (+ explain)": time.perf_counter()}
parser = cli_parser._parser("explain")  # loads the table: the removed flags are options
marks["parser, with the table loaded"] = time.perf_counter()
args = parser.parse_args(list(FLAGS))
marks["parse"] = time.perf_counter()
environment = Environment.probe(table=api.builtin_table())
marks["probe"] = time.perf_counter()
config = cli._resolve(args, environment=environment)
marks["resolve"] = time.perf_counter()
text = explain_text(config)
marks["render"] = time.perf_counter()
previous = started
for name, mark in marks.items():
    print(f"{name}\t{(mark - previous) * 1000:.3f}")
    previous = mark
"""


def process_times(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _commands() -> dict[str, list[str]]:
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "python -c 'import attrs'": [python, "-c", "import attrs"],
        "python -c 'import resolver.cli'": [python, "-c", "import resolver.cli"],
        "python -m resolver explain": [python, "-m", "resolver", *FLAGS],
    }
    script = shutil.which("resolver", path=os.path.dirname(python))
    if script is not None:  # the console script pip installs (no runpy, which -m imports)
        commands["resolver explain (console script)"] = [script, *FLAGS]
    return commands


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--rounds", type=int, default=15)
    options.add_argument("--phases", action="store_true", help="also time the phases inside one process")
    rounds = options.parse_args().rounds
    phases = options.parse_args().phases
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(RESOLVER_CACHE_DIR=os.path.join(folder, "tables"), PYTHONPYCACHEPREFIX=os.path.join(folder, "pyc"))
        commands = _commands()
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for round_ in range(rounds + 2):
            for name, command in commands.items():
                measured = process_times(command, env)
                if round_ >= 2:  # two warm-up rounds fill both caches
                    times[name].append(measured)
        print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, {rounds} rounds, medians in ms")
        print(f"{'':<38}{'wall':>8}{'+ pass':>8}{'x pass':>8}{'cpu':>8}{'+ pass':>8}")
        base_wall = statistics.median(w for w, _ in times["python -c pass"])
        base_cpu = statistics.median(c for _, c in times["python -c pass"])
        for name, measured in times.items():
            wall = statistics.median(w for w, _ in measured)
            cpu = statistics.median(c for _, c in measured)
            print(
                f"{name:<38}{wall * 1000:8.1f}{(wall - base_wall) * 1000:8.1f}{wall / base_wall:8.2f}"
                f"{cpu * 1000:8.1f}{(cpu - base_cpu) * 1000:8.1f}"
            )
        if phases:
            found: dict[str, list[float]] = {}
            for _ in range(rounds):
                out = subprocess.run(
                    [sys.executable, "-c", f"FLAGS = {FLAGS!r}\n" + _PHASES],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=120,
                ).stdout
                for line in out.splitlines():
                    name, ms = line.split("\t")
                    found.setdefault(name, []).append(float(ms))
            print("\nphases inside one `resolver explain` process (wall, medians in ms):")
            for name, values in found.items():
                print(f"  {name:<36}{statistics.median(values):8.2f}")


if __name__ == "__main__":
    main()
