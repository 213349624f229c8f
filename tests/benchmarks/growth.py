"""How the engine's cost grows with rules that never fire (issue 27, target 4). Not a test: prints
medians, their spread and the ratios to the built-in table measured in the same rounds.

    python tests/benchmarks/growth.py [--rounds 7] [--factors 10 100] [--compile-rounds 1] [--code DIR]

The tables: the built-in one, and the built-in one plus ``factor`` times as many inert rules
(``engine_cases.inert_rules``: each reads a variable of its own that no snapshot sets). For each:

* warm ``resolve(devices=2, strategy="ddp")``: the table loaded and its code generated, a snapshot
  never seen before on every call (made before the timed calls), process CPU time per call;
* from cache: ``load_rules`` of the same files with the compiled table in the disk cache (the
  median of a few loads in the round: ``LOADS``);
* load and compile: ``load_rules`` with the disk cache off (``--compile-rounds``; 0 skips it);
* 100 extra site rule files (3 inert rules each) from the disk cache.

Each round runs in a fresh process (one per checkout and round), the tables in turn inside it; the
built-in table's figures of the same process are the control that the ratios divide by (the load of
this machine moves between rounds, not within one). ``--code DIR`` runs every round a second time
with ``resolver`` imported from another checkout (before and after in one run, rounds alternating).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
#: Calls timed per figure, by factor (about 10-50 ms of work each).
CALLS = {0: 400, 1: 400, 10: 60}
#: Loads from the disk cache timed per figure, by factor (the median is the figure): one load of
#: the built-in table is 2-4 ms, where one scheduling hiccup moves a single reading by a third.
LOADS = {0: 15, 10: 5, 100: 3}
SITE_FILES = 100


def _child(folder: str, factors: list[int], what: str) -> dict[str, Any]:
    """One round in this process: every table's figures, the built-in table's first."""
    sys.path.insert(0, HERE)
    from engine_cases import inert_rules, warm_runs

    from resolver import Environment, load_rules, resolve

    builtin = len(load_rules().rules)
    paths: dict[int, list[str]] = {0: []}
    for factor in factors:
        path = os.path.join(folder, f"inert{factor}.toml")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(inert_rules(builtin * factor))
        paths[factor] = [path]
    out: dict[str, Any] = {"rules": {}, "resolve_us": {}, "cache_ms": {}, "compile_ms": {}}
    for factor, files in paths.items():
        if what == "compile":
            started = time.process_time()
            table = load_rules(files)
            out["compile_ms"][factor] = 1000 * (time.process_time() - started)
            out["rules"][factor] = len(table.rules)
            continue
        loads = []
        for _ in range(LOADS.get(factor, 1)):
            table = None  # the last load's table is freed before the clock starts, not inside it
            started = time.process_time()
            table = load_rules(files)
            loads.append(1000 * (time.process_time() - started))
        out["cache_ms"][factor] = statistics.median(loads)
        out["rules"][factor] = len(table.rules)
        for _ in range(warm_runs()):  # generating the code is not part of the figure
            resolve(devices=2, strategy="ddp", environment=Environment(hostname="warm"), rules=table)
        calls = CALLS.get(factor, 12)
        snapshots = [Environment(hostname=f"node{i}") for i in range(calls)]
        started = time.process_time()
        for snapshot in snapshots:
            resolve(devices=2, strategy="ddp", environment=snapshot, rules=table)
        out["resolve_us"][factor] = 1e6 * (time.process_time() - started) / calls
    if what == "resolve":
        sites = []
        for i in range(SITE_FILES):
            path = os.path.join(folder, f"site{i:03}.toml")
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write(inert_rules(3).replace("inert.", f"site{i}.").replace("INERT_", f"SITE{i}_"))
            sites.append(path)
        started = time.process_time()
        load_rules(sites)
        out["sites_ms"] = 1000 * (time.process_time() - started)
    return out


def _round(code: str, folder: str, cache: str, factors: list[int], what: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": code, "RESOLVER_CACHE_DIR": cache if what != "compile" else "off"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", what, "--folder", folder, "--factors", *map(str, factors)],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"round failed ({code}):\n{done.stderr}")
    return json.loads(done.stdout)


def _spread(values: list[float], digits: int = 1) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):.{digits}f} ({ordered[0]:.{digits}f}-{ordered[-1]:.{digits}f})"


def _report(label: str, rounds: list[dict[str, Any]], key: str, unit: str, factors: list[int]) -> None:
    """Medians with spread per table, and the round-by-round ratio to the built-in table."""
    if not rounds or not rounds[0].get(key):
        return
    print(f"  {label} ({unit}):")
    for factor in [0, *factors]:
        values = [r[key][str(factor)] for r in rounds]
        line = f"    {'built-in' if factor == 0 else f'+{factor}x'} ({rounds[0]['rules'][str(factor)]} rules): "
        line += _spread(values)
        if factor:
            ratios = [r[key][str(factor)] / r[key]["0"] for r in rounds]
            line += f"   ratio to built-in {_spread(ratios, 2)}x (limit {factor}x)"
        print(line)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--rounds", type=int, default=7)
    options.add_argument("--factors", type=int, nargs="+", default=[10, 100])
    options.add_argument("--compile-rounds", type=int, default=1, help="rounds with the disk cache off (0: none)")
    options.add_argument("--code", help="also run every round with resolver from this checkout")
    options.add_argument("--child", choices=["resolve", "compile"], help=argparse.SUPPRESS)
    options.add_argument("--folder", help=argparse.SUPPRESS)
    parsed = options.parse_args()
    if parsed.child:
        print(json.dumps(_child(parsed.folder, parsed.factors, parsed.child)))
        return
    here = os.path.dirname(os.path.dirname(HERE))
    codes = {"this checkout": here}
    if parsed.code:
        codes["--code"] = os.path.abspath(parsed.code)
    with tempfile.TemporaryDirectory() as folder:
        results: dict[str, dict[str, list[dict[str, Any]]]] = {name: {"resolve": [], "compile": []} for name in codes}
        caches = {name: os.path.join(folder, f"cache{i}") for i, name in enumerate(codes)}  # one per checkout
        for name, code in codes.items():  # fills each checkout's table cache (and writes the rule files)
            _round(code, folder, caches[name], parsed.factors, "resolve")
        for _ in range(parsed.rounds):
            for name, code in codes.items():
                results[name]["resolve"].append(_round(code, folder, caches[name], parsed.factors, "resolve"))
        for _ in range(parsed.compile_rounds):
            for name, code in codes.items():
                results[name]["compile"].append(_round(code, folder, caches[name], parsed.factors, "compile"))
        load = os.getloadavg()
        print(f"load average {load[0]:.2f} {load[1]:.2f}, {os.cpu_count()} cores, {parsed.rounds} rounds")
        print("medians (lowest-highest) of process CPU time; ratios taken round by round\n")
        for name, code in codes.items():
            found = results[name]
            print(f"{name} ({code}):")
            _report("warm resolve(), a new snapshot each call", found["resolve"], "resolve_us", "µs", parsed.factors)
            _report("load from the disk cache", found["resolve"], "cache_ms", "ms", parsed.factors)
            _report("load and compile, no cache", found["compile"], "compile_ms", "ms", parsed.factors)
            sites = [r["sites_ms"] for r in found["resolve"]]
            print(f"  {SITE_FILES} site rule files (3 inert rules each) from the disk cache (ms): {_spread(sites)}\n")


if __name__ == "__main__":
    main()
