"""``resolve()`` called N times in a fresh process, for N from 1 to 1000: what a CLI command or a
launched rank (once), a script or a notebook (a few times), a sweep (hundreds) and a golden run
(thousands) pay in all, the first call (which loads the table and builds its closures) included; the
engine's modules are imported before the clock, when the snapshots are made. Not a test:
prints medians of the N calls' CPU time and, with ``--code DIR``, the same with ``resolver`` from
another checkout beside it, rounds alternating, and a control: this checkout against itself.

    python tests/benchmarks/resolve_count.py [--rounds 7] [--counts 1 2 5 10 30 65 100 300 1000] [--code DIR]

Each call gets a snapshot of its own (``Environment(hostname=...)``, made before the clock, as a
sweep's are) and the same flags (``devices=2, strategy="ddp"``). The table and byte-code caches are
warm (a temporary folder, filled first). The evaluator runs a table's closures for its first
``GENERATE_AFTER`` runs and then generates its code; before 2026-11-27 it did so on the second run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

_CALLS = """
import sys, time
import resolver
snapshots = [resolver.Environment(hostname=f"node{i}") for i in range(int(sys.argv[1]))]
started = time.process_time()
for snapshot in snapshots:
    resolver.resolve(devices=2, strategy="ddp", environment=snapshot)
print(time.process_time() - started)
"""


def calls_ms(count: int, env: dict[str, str]) -> float:
    """CPU milliseconds of ``count`` calls in a fresh process."""
    cwd = env.get("PYTHONPATH", "").split(os.pathsep)[0] or None
    out = subprocess.run(
        [sys.executable, "-c", _CALLS, str(count)], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return 1000 * float(out.stdout)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--rounds", type=int, default=7)
    options.add_argument("--counts", type=int, nargs="+", default=[1, 2, 5, 10, 30, 65, 100, 300, 1000])
    options.add_argument("--code", help="also run with resolver imported from this checkout")
    parsed = options.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as folder:
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        base.update(RESOLVER_CACHE_DIR=os.path.join(folder, "tables"), PYTHONPYCACHEPREFIX=os.path.join(folder, "pyc"))
        sides = {"this checkout": {**base, "PYTHONPATH": here}, "control (again)": {**base, "PYTHONPATH": here}}
        if parsed.code is not None:
            sides["--code"] = {**base, "PYTHONPATH": os.path.abspath(parsed.code)}
        for env in sides.values():  # fills the caches
            calls_ms(3, env)
        found: dict[str, dict[int, list[float]]] = {name: {n: [] for n in parsed.counts} for name in sides}
        for _ in range(parsed.rounds):
            for count in parsed.counts:
                for name, env in sides.items():
                    found[name][count].append(calls_ms(count, env))
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, {parsed.rounds} rounds")
    print("N calls in a fresh process, CPU ms (median; per call in brackets); ratios of medians")
    names = list(sides)
    header = "".join(f"{name:>24}" for name in names)
    print(f"{'N':>6}{header}{'control / this':>16}" + (f"{'--code / this':>16}" if "--code" in sides else ""))
    for count in parsed.counts:
        medians = {name: statistics.median(found[name][count]) for name in names}
        cells = "".join(f"{m:12.2f} ({1000 * m / count:7.1f} us)" for m in medians.values())
        ratios = f"{medians['control (again)'] / medians['this checkout']:16.2f}"
        if "--code" in sides:
            ratios += f"{medians['--code'] / medians['this checkout']:16.2f}"
        print(f"{count:>6}{cells}{ratios}")


if __name__ == "__main__":
    main()
