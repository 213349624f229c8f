"""How fast the rule engine is: warm resolve(), a cold ``resolver explain`` process, and how the cost
grows with the number of rules. Disabled by default (pytest-benchmark); run with timings:

    pytest tests/benchmarks/test_engine_speed.py --benchmark-enable

No result is cached between calls: every resolve() evaluates the compiled table. The comparison
with PyTorch Lightning's ``_AcceleratorConnector`` runs when ``pytorch_lightning`` is importable
(see ``compare_lightning.py`` and README.md in this folder for the side-by-side figures).
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
from typing import Any

import pytest
from cold_explain import FLAGS, process_times
from engine_cases import CASES, LIGHTNING_DEFAULTS, inert_rules, warm_runs

from resolver import Environment, load_rules, resolve

LAPTOP = Environment()


@pytest.mark.parametrize("case", sorted(CASES))
def test_warm_resolve(benchmark, case):
    benchmark.group = f"warm: {case}"
    flags, _ = CASES[case]
    for _ in range(warm_runs()):  # warm: table loaded, and its code generated
        resolve(**flags, environment=LAPTOP)
    config = benchmark(lambda: resolve(**flags, environment=LAPTOP))
    assert config.world_size >= 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_warm_resolve_new_snapshot(benchmark, case):
    """A snapshot never seen before on every call (sweeps, golden runs, each worker), made outside
    the timed call: nothing a snapshot's inputs were read into is reused."""
    benchmark.group = f"warm: {case}"
    flags, _ = CASES[case]
    for _ in range(warm_runs()):
        resolve(**flags, environment=LAPTOP)
    counter = itertools.count()

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        return (), {**flags, "environment": Environment(hostname=f"node{next(counter)}")}

    rounds = 2000 if not benchmark.disabled else 1
    config = benchmark.pedantic(resolve, setup=setup, rounds=rounds, warmup_rounds=10)
    assert config.world_size >= 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_resolve_probing(benchmark, case):
    """``resolve()`` as users call it: it probes this machine on every call (variables read each
    time; what cannot change within the process read once)."""
    benchmark.group = f"warm: {case}"
    flags, _ = CASES[case]
    for _ in range(warm_runs()):
        resolve(**flags)
    config = benchmark(lambda: resolve(**flags))
    assert config.world_size >= 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_lightning_connector(benchmark, case):
    """The reference: Lightning 2.x's connector on the same flags, in the same run (it detects the
    machine on every construction)."""
    connector = pytest.importorskip(
        "pytorch_lightning.trainer.connectors.accelerator_connector",
        reason="pytorch_lightning is not installed beside the project: pip install -e '.[bench]' (README.md here)",
    )
    benchmark.group = f"warm: {case}"
    _, flags = CASES[case]
    arguments = {**LIGHTNING_DEFAULTS, **flags}
    connector._AcceleratorConnector(**arguments)
    benchmark(lambda: connector._AcceleratorConnector(**arguments))


@pytest.mark.parametrize("factor", [0, 10, 100])
def test_resolve_with_inert_rules(benchmark, tmp_path, factor):
    """Warm resolve() with 10x and 100x the built-in table's rules added (none fires): linear at most."""
    builtin = len(load_rules().rules)
    paths = []
    if factor:
        extra = tmp_path / "inert.toml"
        extra.write_text(inert_rules(builtin * factor))
        paths.append(extra)
    table = load_rules(paths)
    benchmark.group = "rules: warm resolve"
    benchmark.extra_info["rules"] = len(table.rules)
    for _ in range(warm_runs()):  # generating the code is not part of the figure
        resolve(devices=2, strategy="ddp", environment=LAPTOP, rules=table)
    config = benchmark(lambda: resolve(devices=2, strategy="ddp", environment=LAPTOP, rules=table))
    assert config.notes == ()


@pytest.mark.parametrize("factor", [0, 10, 100])
def test_compile_with_inert_rules(benchmark, tmp_path, factor, monkeypatch):
    """Loading and compiling (no disk cache) with 10x and 100x extra rules: linear at most."""
    monkeypatch.setenv("RESOLVER_CACHE_DIR", "off")
    builtin = len(load_rules().rules)
    paths = []
    if factor:
        extra = tmp_path / "inert.toml"
        extra.write_text(inert_rules(builtin * factor))
        paths.append(extra)
    benchmark.group = "rules: load and compile"
    table = benchmark.pedantic(lambda: load_rules(paths), rounds=3 if factor < 100 else 1, iterations=1)
    benchmark.extra_info["rules"] = len(table.rules)


def test_load_site_files_from_cache(benchmark, tmp_path, monkeypatch):
    """100 extra site rule files (3 inert rules each) loaded from the disk cache: the cache entry is
    found by reading the files, not by compiling them."""
    monkeypatch.setenv("RESOLVER_CACHE_DIR", str(tmp_path / "cache"))
    paths = []
    for i in range(100):
        path = tmp_path / f"site{i:03}.toml"
        path.write_text(inert_rules(3).replace("inert.", f"site{i}.").replace("INERT_", f"SITE{i}_"))
        paths.append(path)
    table = load_rules(paths)  # compiled once, then cached
    benchmark.group = "rules: load from cache"
    benchmark.extra_info["rules"] = len(table.rules)
    loaded = benchmark.pedantic(lambda: load_rules(paths), rounds=5 if not benchmark.disabled else 1, iterations=1)
    assert len(loaded.rules) == len(table.rules)


@pytest.mark.parametrize("entry", ["python -m resolver", "console script"])
def test_cold_explain_process(benchmark, tmp_path, entry):
    """A new ``resolver explain`` process against ``python -c pass``, interleaved, warm disk caches
    (``cold_explain.py`` prints the same comparison with a breakdown).

    The reported figure is the explain process; ``extra_info`` holds both medians (wall and CPU
    time) and their differences.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["RESOLVER_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")  # byte code cached, as in an installed package
    if entry == "console script":
        script = shutil.which("resolver", path=os.path.dirname(sys.executable))
        if script is None:
            pytest.skip("no `resolver` console script next to this Python")
        explain = [script, *FLAGS]
    else:
        explain = [sys.executable, "-m", "resolver", *FLAGS]
    baseline = [sys.executable, "-c", "pass"]
    for _ in range(2):  # fill the table cache and the byte-code cache
        process_times(explain, env)
        process_times(baseline, env)
    explains, passes = [], []
    for _ in range(15 if not benchmark.disabled else 1):  # disabled (the default): checks that it runs
        passes.append(process_times(baseline, env))
        explains.append(process_times(explain, env))
    for kind, index in (("wall", 0), ("cpu", 1)):
        explain_ms = 1000 * statistics.median(t[index] for t in explains)
        pass_ms = 1000 * statistics.median(t[index] for t in passes)
        benchmark.extra_info[f"python_pass_median_{kind}_ms"] = round(pass_ms, 1)
        benchmark.extra_info[f"explain_median_{kind}_ms"] = round(explain_ms, 1)
        benchmark.extra_info[f"difference_{kind}_ms"] = round(explain_ms - pass_ms, 1)
    benchmark.group = "cold process"
    benchmark.pedantic(lambda: process_times(explain, env), rounds=5, iterations=1)
    assert os.path.isdir(env["RESOLVER_CACHE_DIR"])


def test_growth_script_prints_ratios_to_the_builtin_table():
    """``growth.py`` runs (one round, a table twice the built-in one, no compile): it prints each
    figure beside the built-in table's, with the ratio (no timing claim)."""
    script = os.path.join(os.path.dirname(__file__), "growth.py")
    done = subprocess.run(
        [sys.executable, script, "--rounds", "1", "--factors", "1", "--compile-rounds", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ratio to built-in") == 2  # warm resolve() and the load from the cache
    assert "100 site rule files" in done.stdout
