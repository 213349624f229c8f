"""A cold ``resolver explain --devices 2 --strategy ddp`` process against ``python -c pass`` and
against a PyTorch Lightning process deciding the same, the first ``resolve()`` in a fresh process,
and where the time goes. Not a test: prints medians, differences and ratios (issue 27, target 3).

    python tests/benchmarks/cold_explain.py [--rounds 15] [--phases] [--lightning-rounds 3] [--code DIR]

Every command runs once per round, interleaved, with byte code cached (``PYTHONPYCACHEPREFIX``,
``PYTHONDONTWRITEBYTECODE`` unset) and a warm compiled-table cache, both in a fresh temporary
folder filled by two warm-up rounds. Each figure is the median of the wall time and of the
process's CPU time (user + system; on a busy machine, time spent waiting for a core is not in it).
The steps between the commands give the breakdown: the interpreter, ``import attrs`` (which
``resolver._engine.operators`` needs), the rest of ``import resolver.cli``, and the command's own work
(parsing, loading the table, probing, resolving, printing); ``--phases`` also times that work
inside one process, phase by phase, and the first ``resolve()`` step by step (``import attrs``, the
engine's modules, the cached table and its evaluator, the call, and the garbage collector's share;
with ``--code``, beside the other checkout's, rounds alternating).

``first resolve()`` is timed inside a fresh process: ``import resolver``, then the clock, then
``resolver.resolve(devices=2, strategy="ddp")`` (which probes the machine, imports the engine and
attrs and loads the cached table); a second figure imports attrs before the clock, which leaves
the engine's own share. ``--code DIR`` also runs the explain and the first resolve() (timed inside
the process and as a whole process) with ``resolver`` imported from another checkout (the main
branch's: a before and after in one run).
``--lightning-rounds N`` (0: skip) runs a Lightning process that builds its
``_AcceleratorConnector`` for the same flags and prints the result, N times, each next to five
``resolver explain`` (Lightning imports torch: seconds a process).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

FLAGS = ("explain", "--devices", "2", "--strategy", "ddp")

_PHASES = r"""
import time
started = time.perf_counter()
import resolver.cli
import resolver.cli.parser as cli_parser
import resolver.cli.shared as cli_shared
from resolver import api
from resolver._snapshot.environment import Environment
from resolver.cli.explain import explain_text
marks = {"import resolver.cli (+ explain)": time.perf_counter()}
from resolver.plugins import load_plugins
load_plugins()  # the plugin list, from the cache folder
marks["plugin list"] = time.perf_counter()
parser = cli_parser._parser("explain")  # loads the table: the removed flags are options
marks["parser, with the table loaded"] = time.perf_counter()
args = parser.parse_args(list(FLAGS))
marks["parse"] = time.perf_counter()
environment = Environment.probe(table=api.builtin_table())
marks["probe"] = time.perf_counter()
config = cli_shared.resolve_args(args, environment=environment)
marks["resolve"] = time.perf_counter()
text = explain_text(config)
marks["render"] = time.perf_counter()
previous = started
for name, mark in marks.items():
    print(f"{name}\t{(mark - previous) * 1000:.3f}")
    previous = mark
"""


def process_times(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process (run in ``$PYTHONPATH``'s first folder if set: ``python -c``
    and ``-m`` put the current folder first on ``sys.path``)."""
    cwd = env.get("PYTHONPATH", "").split(os.pathsep)[0] or None
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A blocking wait4 sees the exit at once and gives the child's own CPU time; a wait with a timeout
    # (subprocess.run's) polls, sleeping up to 50 ms between looks, which the wall time would count.
    deadline = threading.Timer(120, process.kill)
    deadline.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        deadline.cancel()
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)
    return wall, usage.ru_utime + usage.ru_stime


_FIRST_RESOLVE = """
import time
import resolver
wall, cpu = time.perf_counter(), time.process_time()
resolver.resolve(devices=2, strategy="ddp")
print(time.perf_counter() - wall, time.process_time() - cpu)
"""

#: The first ``resolve()`` step by step, in a fresh process after ``import resolver`` (``--phases``):
#: ``import attrs`` (``ResolvedConfig``'s library), the engine's modules (with their attrs classes),
#: the cached table and its evaluator, then the call (the probe and the run). The garbage
#: collector's time (``gc.callbacks``) is taken out of each step and shown on its own.
_FIRST_PHASES = r"""
import gc, time
import resolver
paused = [0.0, 0.0]
def _collector(phase, info):
    if phase == "start":
        paused[1] = time.perf_counter()
    else:
        paused[0] += time.perf_counter() - paused[1]
gc.callbacks.append(_collector)
marks = []
def mark(name):
    marks.append((name, time.perf_counter(), paused[0]))
mark("")
import attrs
mark("import attrs")
import resolver.api
mark("import resolver.api (the engine's modules)")
resolver.api.builtin_table()
mark("the cached table and its evaluator")
resolver.resolve(devices=2, strategy="ddp")
mark("resolve() itself (probe, run, config)")
for (_, before, gc_before), (name, after, gc_after) in zip(marks, marks[1:]):
    print(f"{name}\t{((after - before) - (gc_after - gc_before)) * 1000:.3f}")
print(f"the garbage collector, in all of them\t{(marks[-1][2] - marks[0][2]) * 1000:.3f}")
print(f"in all (the first resolve())\t{(marks[-1][1] - marks[0][1]) * 1000:.3f}")
"""

#: Before the clock in the second first-resolve figure: what is left is the engine's own share (the
#: modules, the cached table, the probe, the run), ``import attrs`` (``ResolvedConfig`` is an attrs
#: class; ``import resolver`` does not import it) being the difference.
_ATTRS = "import attrs\n"

_LIGHTNING = """
try:
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
except ImportError:
    from pytorch_lightning.trainer.connectors.accelerator_connector import _AcceleratorConnector
connector = _AcceleratorConnector(
    devices=2, num_nodes=1, accelerator="auto", strategy="ddp", plugins=None, precision=None,
    sync_batchnorm=False, benchmark=None, use_distributed_sampler=True, deterministic=None,
)
print(type(connector.strategy).__name__, type(connector.accelerator).__name__, connector._parallel_devices)
"""


def _lightning_installed() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(name) is not None for name in ("lightning", "pytorch_lightning"))


def first_resolve(env: dict[str, str], script: str = "") -> tuple[float, float]:
    """Wall and CPU seconds of the first ``resolve()`` in a fresh process, after ``import resolver``
    (``script``: what else runs before the clock)."""
    out = _python(_FIRST_RESOLVE.replace("import resolver\n", f"import resolver\n{script}"), env).split()
    return float(out[0]), float(out[1])


def _python(code: str, env: dict[str, str]) -> str:
    """What ``python -c code`` prints, run as :func:`process_times` runs a command."""
    cwd = env.get("PYTHONPATH", "").split(os.pathsep)[0] or None
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True, timeout=120
    ).stdout


def _commands(env: dict[str, str], code: str | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each command with the environment it runs in (``code``: also the explain from that checkout)."""
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "python -c 'import attrs'": [python, "-c", "import attrs"],
        "python -c 'import resolver.cli'": [python, "-c", "import resolver.cli"],
        "python -c 'import resolver; resolve()'": [python, "-c", _FIRST_RESOLVE],
        "python -m resolver explain": [python, "-m", "resolver", *FLAGS],
    }
    script = shutil.which("resolver", path=os.path.dirname(python))
    if script is not None:  # the console script pip installs (no runpy, which -m imports)
        commands["resolver explain (console script)"] = [script, *FLAGS]
    found = {name: (command, env) for name, command in commands.items()}
    if code is not None:
        other = {**env, "PYTHONPATH": os.path.abspath(code)}
        found["--code: python -m resolver explain"] = ([python, "-m", "resolver", *FLAGS], other)
        found["--code: python -c 'import resolver; resolve()'"] = ([python, "-c", _FIRST_RESOLVE], other)
        if script is not None:
            found["--code: resolver explain (console script)"] = ([script, *FLAGS], other)
    return found


def _explain_command() -> list[str]:
    script = shutil.which("resolver", path=os.path.dirname(sys.executable))
    return [script, *FLAGS] if script is not None else [sys.executable, "-m", "resolver", *FLAGS]


def _print_phases(found: dict[str, dict[str, list[float]]], prefix: str) -> None:
    """The medians of the phases named ``prefix...`` (beside the other checkout's, with ``--code``)."""
    for name in (n for n in found[""] if n.startswith(prefix)):
        other = found.get("--code", {}).get(name)
        beside = f"   --code {statistics.median(other):8.2f}" if other else ""
        print(f"  {name[len(prefix) :]:<44}{statistics.median(found[''][name]):8.2f}{beside}")


def _median_ms(values: list[tuple[float, float]], index: int) -> float:
    return 1000 * statistics.median(v[index] for v in values)


def _lightning(env: dict[str, str], rounds: int) -> None:
    """A Lightning process deciding the same flags, next to five ``resolver explain`` each round."""
    if not _lightning_installed():
        print("\nLightning: not installed (pip install -e '.[bench]'), skipped")
        return
    ours_command, theirs_command = _explain_command(), [sys.executable, "-c", _LIGHTNING]
    process_times(theirs_command, env)  # warm-up: byte code, the page cache
    ours, theirs = [], []
    for _ in range(rounds):  # five explains a round: one Lightning process lasts seconds, an explain a blink
        ours.extend(process_times(ours_command, env) for _ in range(5))
        theirs.append(process_times(theirs_command, env))
    print(f"\nLightning process vs `resolver explain`, {rounds} rounds, medians in ms (load {os.getloadavg()[0]:.2f}):")
    for kind, index in (("wall", 0), ("cpu", 1)):
        a, b = _median_ms(ours, index), _median_ms(theirs, index)
        print(f"  {kind}: resolver explain {a:8.1f}   Lightning {b:9.1f}   Lightning / resolver {b / a:6.1f}x")


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--rounds", type=int, default=15)
    options.add_argument("--phases", action="store_true", help="also time the phases inside one process")
    options.add_argument("--code", help="also run the explain and first resolve() with resolver from this checkout")
    options.add_argument("--lightning-rounds", type=int, default=3, help="Lightning processes to run (0: none)")
    parsed = options.parse_args()
    rounds, phases = parsed.rounds, parsed.phases
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(RESOLVER_CACHE_DIR=os.path.join(folder, "tables"), PYTHONPYCACHEPREFIX=os.path.join(folder, "pyc"))
        commands = _commands(env, parsed.code)
        firsts: dict[str, tuple[dict[str, str], str]] = {
            "first resolve() after import resolver": (env, ""),
            "  the same, attrs imported before": (env, _ATTRS),
        }
        if parsed.code is not None:
            other = commands["--code: python -m resolver explain"][1]
            firsts["--code: first resolve()"] = (other, "")
            firsts["--code: the same, attrs imported before"] = (other, _ATTRS)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        first: dict[str, list[tuple[float, float]]] = {name: [] for name in firsts}
        for round_ in range(rounds + 2):
            for name, (command, command_env) in commands.items():
                measured = process_times(command, command_env)
                if round_ >= 2:  # two warm-up rounds fill both caches
                    times[name].append(measured)
            for name, (first_env, script) in firsts.items():
                measured = first_resolve(first_env, script)
                if round_ >= 2:
                    first[name].append(measured)
        print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, {rounds} rounds, medians in ms")
        print(f"{'':<44}{'wall':>8}{'+ pass':>8}{'x pass':>8}{'cpu':>8}{'+ pass':>8}")
        base_wall = _median_ms(times["python -c pass"], 0)
        base_cpu = _median_ms(times["python -c pass"], 1)
        for name, measured in times.items():
            wall, cpu = _median_ms(measured, 0), _median_ms(measured, 1)
            print(f"{name:<44}{wall:8.1f}{wall - base_wall:8.1f}{wall / base_wall:8.2f}{cpu:8.1f}{cpu - base_cpu:8.1f}")
        # The explain's own share: what it costs over `python -c 'import attrs'`, which no explain avoids
        # (ResolvedConfig is an attrs class): the part this project's code decides.
        attrs_cpu = _median_ms(times["python -c 'import attrs'"], 1)
        print("\nCPU over `python -c 'import attrs'` (the explain's own share), difference of medians in ms:")
        for name, measured in times.items():
            if "explain" in name:
                print(f"  {name:<42}{_median_ms(measured, 1) - attrs_cpu:8.1f}")
        print("\ninside a fresh process, medians in ms (spread: lowest-highest):")
        for name, measured in first.items():
            walls, cpus = sorted(1000 * w for w, _ in measured), sorted(1000 * c for _, c in measured)
            print(
                f"  {name:<42}wall {statistics.median(walls):7.1f} ({walls[0]:.1f}-{walls[-1]:.1f})"
                f"   cpu {statistics.median(cpus):7.1f} ({cpus[0]:.1f}-{cpus[-1]:.1f})"
            )
        if phases:
            sides = {"": env}
            if parsed.code is not None:
                sides["--code"] = commands["--code: python -m resolver explain"][1]
            found: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
            for _ in range(rounds):  # the sides alternate
                for side, side_env in sides.items():
                    for prefix, script in (("explain: ", f"FLAGS = {FLAGS!r}\n" + _PHASES), ("first: ", _FIRST_PHASES)):
                        for line in _python(script, side_env).splitlines():
                            name, ms = line.split("\t")
                            found[side].setdefault(prefix + name, []).append(float(ms))
            print("\nphases inside one `resolver explain` process (wall, medians in ms):")
            _print_phases(found, "explain: ")
            print(
                "\nthe first resolve() after import resolver, step by step (wall less the collector's; medians in ms):"
            )
            _print_phases(found, "first: ")
        if parsed.lightning_rounds > 0:
            _lightning(env, parsed.lightning_rounds)


if __name__ == "__main__":
    main()
