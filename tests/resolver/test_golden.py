"""The golden scenarios in ``tests/golden/`` are the specification of the rule table.

Each ``tests/golden/<area>-<name>.toml`` holds one scenario: ``[flags]``, ``[environment]`` and the
expected outcome (``[expect]``: every resolved field and the rule that decided it, or the error).

- ``test_scenario[<name>]`` resolves one scenario and fails with the differences from its
  ``[expect]``.
- ``test_enough_scenarios``: there are at least 200 of them.
- ``test_every_rule_fires``: every rule of the built-in table decides a slot, raises its error or
  emits its note in at least one scenario (a rule that never fires is dead or untested).
- ``test_rule_order_does_not_matter``: shuffling the rule files, and the rules inside each file,
  changes no outcome.

Update mode: after changing a rule on purpose, rewrite the expectations instead of comparing::

    RESOLVER_UPDATE_GOLDEN=1 python -m pytest tests/resolver/test_golden.py

Each rewritten file is reported as a ``GoldenFileUpdated`` warning in pytest's warnings summary
(unchanged files are left alone). Review the diff before committing: it is the behaviour change.
The same is available as ``resolver golden --update tests/golden``.
"""

from __future__ import annotations

import os
import random
import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest
from tomli_w import dumps

from resolver import golden
from resolver._engine.compiled import CompiledTable
from resolver._engine.errors import ResolutionError
from resolver._engine.reporter import RecordingReporter
from resolver._engine.table import RuleSource, read_sources
from resolver.api import builtin_rules_dir, compile_sources, load_rules, run_rules

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
SCENARIO_PATHS = sorted(GOLDEN_DIR.glob("*.toml"))
UPDATE = os.environ.get("RESOLVER_UPDATE_GOLDEN") == "1"
MIN_SCENARIOS = 200
SHUFFLE_SEEDS = (1, 7, 2024)
#: Rules that no built-in flag can reach, only a site's rule file (every built-in strategy has a
#: launcher rule), each with the test that makes it fire.
SITE_ONLY_RULES = {
    "launcher.missing": (
        "tests/resolver/domain/test_lightning_parity.py::test_a_strategy_without_a_launcher_rule_is_a_conflict"
    ),
}


class GoldenFileUpdated(UserWarning):
    """A golden file was rewritten in update mode (``RESOLVER_UPDATE_GOLDEN=1``)."""


@pytest.fixture(scope="module")
def scenarios() -> list[golden.Scenario]:
    return [golden.load_scenario(path) for path in SCENARIO_PATHS]


@pytest.mark.parametrize("path", SCENARIO_PATHS, ids=[p.stem for p in SCENARIO_PATHS])
def test_scenario(path: Path) -> None:
    scenario = golden.load_scenario(path)
    if UPDATE:
        if golden.update(scenario):
            warnings.warn(GoldenFileUpdated(f"rewrote {path.relative_to(GOLDEN_DIR.parent.parent)}"), stacklevel=1)
        return
    problems = golden.check(scenario)
    assert not problems, f"{path.name} ({scenario.description}):\n  " + "\n  ".join(problems)


def test_enough_scenarios() -> None:
    assert len(SCENARIO_PATHS) >= MIN_SCENARIOS, f"only {len(SCENARIO_PATHS)} golden scenarios"


def _fired_rules(scenario: golden.Scenario) -> set[str]:
    reporter = RecordingReporter()
    fired: set[str] = set()
    try:
        run_rules(scenario.flags, scenario.environment, None, reporter)
    except ResolutionError as error:
        if error.rule:
            fired.add(error.rule)
    for _, provenance in reporter.decisions.values():
        if provenance.rule:
            fired.add(provenance.rule)
    for kind, payload in reporter.events:
        if kind == "noted":
            fired.add(payload[0])
    return fired


def test_every_rule_fires(scenarios: list[golden.Scenario]) -> None:
    fired: set[str] = set()
    for scenario in scenarios:
        fired |= _fired_rules(scenario)
    never = sorted(set(load_rules().rules) - fired - SITE_ONLY_RULES.keys())
    assert not never, f"{len(never)} rule(s) fire in no golden scenario: {', '.join(never)}"


def _shuffled_table(seed: int) -> CompiledTable:
    """The built-in table with its files, and the rules (slots, domains) in each, in a random order."""
    rng = random.Random(seed)
    sources = []
    for source in read_sources([builtin_rules_dir()]):
        document: dict[str, Any] = tomllib.loads(source.text)
        rng.shuffle(document.get("rule", []))
        for section in ("slot", "domain"):
            if section in document:
                items = list(document[section].items())
                rng.shuffle(items)
                document[section] = dict(items)
        place = Path(source.name).relative_to(builtin_rules_dir()).as_posix()  # xla.toml is three files
        sources.append(RuleSource(f"shuffled-{seed}/{place}", dumps(document)))
    rng.shuffle(sources)
    return compile_sources(sources)


@pytest.mark.parametrize("seed", SHUFFLE_SEEDS)
def test_rule_order_does_not_matter(seed: int, scenarios: list[golden.Scenario]) -> None:
    table = _shuffled_table(seed)
    assert sorted(table.rules) == sorted(load_rules().rules)
    differences = [
        scenario.path.stem
        for scenario in scenarios
        if golden.outcome(scenario, rules=table) != golden.outcome(scenario)
    ]
    assert not differences, f"seed {seed}: shuffled rules change {len(differences)} outcome(s): {differences}"
