"""The cold-start benchmark script still runs: one round of each process and of each phase (no timing claim)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_process import run_script

SCRIPT = Path(__file__).with_name("cold_explain.py")

FIRST_RESOLVE_STEPS = (
    "import attrs",
    "import resolver.api (the engine's modules)",
    "the cached table and its evaluator",
    "resolve() itself (probe, run, config)",
    "the garbage collector, in all of them",
    "in all (the first resolve())",
)


def test_phases_print_a_figure_for_each_step_of_the_first_resolve():
    done = run_script(SCRIPT, "--rounds", "1", "--lightning-rounds", "0", "--phases", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    stdout = done.stdout
    lines = stdout.splitlines()
    section = lines.index(next(line for line in lines if line.startswith("the first resolve() after import resolver")))
    figures = {}
    for line in lines[section + 1 :]:
        if not line.strip():
            break
        name, _, value = line.strip().rpartition(" ")
        figures[name.strip()] = float(value)
    assert tuple(figures) == FIRST_RESOLVE_STEPS, stdout
    steps = sum(figures[name] for name in FIRST_RESOLVE_STEPS[:-1])
    # the steps and the collector's share make the whole, read off one clock (each figure rounded to 0.01)
    assert steps == pytest.approx(figures["in all (the first resolve())"], abs=0.05), stdout
