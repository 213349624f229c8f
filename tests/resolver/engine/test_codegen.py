"""The generated evaluation (``resolver._engine.codegen``) decides exactly what the evaluator's closures decide.

The closures are the reference: a run with a reporter always uses them. Every golden scenario and
fuzzed flags and cluster jobs are resolved both ways and compared slot by slot (values with their
types, provenance, notes), and errors must be the same error. The generated code may hand a run
back to the closures only where it meets something out of the ordinary; for the golden scenarios,
which all resolve or fail in ordinary ways, it must never need to.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given as for_all
from hypothesis import strategies as st
from test_fuzz_resolve import FUZZ, cluster_job, environments, flags

from resolver import Environment, Provenance, ResolutionError, golden
from resolver._domain.flag_values import flag_values
from resolver._domain.functions import InvalidInput
from resolver._engine.codegen import Redo
from resolver._engine.evaluator import GENERATE_AFTER, Evaluation, Evaluator
from resolver._engine.reporter import Reporter
from resolver._snapshot.environment import InputPlan
from resolver.api import builtin_table, load_rules

GOLDEN = sorted((Path(__file__).resolve().parents[2] / "golden").glob("*.toml"))


@pytest.fixture(scope="module")
def evaluator() -> Evaluator:
    evaluator = Evaluator(builtin_table())
    warm_up(evaluator)
    return evaluator


def warm_up(evaluator: Evaluator) -> None:
    for _ in range(GENERATE_AFTER + 1):
        evaluator.run(inputs_for(evaluator, {}, Environment()), given)
    assert evaluator.generated is not None


def test_the_code_is_generated_once_the_closures_have_run_generate_after_times() -> None:
    """A process that resolves a few times never pays for generating the code; one that goes on does,
    once, and runs the generated code from then on (runs with a reporter count: they use the closures)."""
    evaluator = Evaluator(builtin_table())
    for run in range(GENERATE_AFTER):
        reporter = Reporter() if run % 2 else None
        evaluator.run(inputs_for(evaluator, {}, Environment()), given, reporter)
        assert evaluator.generated is None and evaluator.generated_source is None
    evaluator.run(inputs_for(evaluator, {}, Environment()), given)
    generated = evaluator.generated
    assert generated is not None and evaluator.generated_source is not None
    evaluator.run(inputs_for(evaluator, {}, Environment()), given)
    assert evaluator.generated is generated  # generated once


def inputs_for(evaluator: Evaluator, flags: dict[str, Any], environment: Environment) -> dict[str, Any]:
    values, _ = environment.inputs(evaluator.table)
    values.update(flag_values(flags))
    return values


def given(slot: str) -> Provenance:
    """Where an input came from, as far as this comparison cares."""
    return Provenance("input", slot)


def outcome(run: Any) -> tuple[str, Any]:
    """What a run gave, comparably: every slot's value (with its type) and provenance, and the
    notes; or the error's kind, message, hint and rule."""
    try:
        evaluation: Evaluation = run()
    except ResolutionError as error:
        return "error", (type(error).__name__, error.message, error.hint, error.rule, error.rule_ids)
    values = {slot: (type(value), value) for slot, value in evaluation.values.items()}
    provenance = {slot: evaluation.provenance[slot] for slot in evaluation.values}
    return "config", (values, provenance, evaluation.notes)


def compare(evaluator: Evaluator, flags: dict[str, Any], environment: Environment, *, strict: bool) -> None:
    try:
        base = inputs_for(evaluator, flags, environment)
    except ResolutionError:
        return  # refused before any rule runs: nothing to compare
    reference = outcome(lambda: evaluator.run(dict(base), given, Reporter()))
    assert outcome(lambda: evaluator.run(dict(base), given)) == reference
    # The generated code alone: it finishes exactly where the reference resolves.
    values, notes = dict(base), []
    try:
        evaluator.generated(values, notes)  # type: ignore[misc]
    except (ResolutionError, Redo, InvalidInput):  # a refusal, a conflict, a wrong value
        assert reference[0] == "error", f"the generated code stopped where the closures resolve: {flags}"
        return
    except TypeError:  # an unhashable value in a lookup: the closures decide (slower, never different)
        assert not strict, f"the generated code handed back an ordinary run: {flags}"
        return
    assert reference[0] == "config", f"the generated code resolved where the closures fail: {reference[1]}"
    ref_values = reference[1][0]
    assert {slot: (type(value), value) for slot, value in values.items()} == ref_values
    assert tuple(notes) == reference[1][2]
    # The same with what resolve() hands it: the sparse inputs the snapshot has (none at all: empty,
    # and the generated code takes every variable and file unset without reading them).
    present = InputPlan(evaluator.table).present(environment)
    told, told_notes = dict(base), []
    evaluator.generated(told, told_notes, present)  # type: ignore[misc]
    assert told == values and told_notes == notes


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_scenarios_decide_alike(evaluator: Evaluator, path: Path) -> None:
    scenario = golden.load_scenario(path)
    compare(evaluator, dict(scenario.flags), scenario.environment, strict=True)


@FUZZ
@for_all(flags=flags, environment=environments())
def test_fuzzed_flags_decide_alike(evaluator: Evaluator, flags: dict[str, Any], environment: Environment) -> None:
    compare(evaluator, flags, environment, strict=False)


@FUZZ
@for_all(rng=st.randoms(use_true_random=False))
def test_fuzzed_cluster_jobs_decide_alike(evaluator: Evaluator, rng: random.Random) -> None:
    job_flags, environment = cluster_job(rng)
    compare(evaluator, job_flags, environment, strict=False)


#: A variable's value and a rule's constant and note full of quotes, backslashes and code.
_TRIGGER = 'it\'s "on"\n' + "'" * 3 + "; import os; os._exit(3) #"
_MOTTO = '"""; raise SystemExit #\\'
_NOTE = "motto: {site.motto} ('\")"
_QUOTED = tomli_w.dumps(
    {
        "slot": {"site.motto": {"stage": "resolved", "type": "str", "nullable": True}},
        "rule": [
            {
                "id": "site.motto.quoted",
                "stage": "resolved",
                "when": {"var.SITE_MOTTO": _TRIGGER},
                "set": {"site.motto": _MOTTO},
                "why": "the motto variable holds quotes and code",
            },
            {"id": "site.motto.noted", "stage": "resolved", "when": {"site.motto": {"set": True}}, "note": _NOTE},
        ],
    }
)


def test_rule_text_never_reaches_the_generated_source(tmp_path: Path) -> None:
    """Values and names full of quotes and code are data the generated code looks up, not code."""
    site = tmp_path / "site.toml"
    site.write_text(_QUOTED, encoding="utf-8")
    evaluator = Evaluator(load_rules([site]))
    warm_up(evaluator)
    source = evaluator.generated_source
    assert source is not None and "'" not in source and '"' not in source and "\\" not in source
    assert "import" not in source and "motto" not in source
    environment = Environment(variables={"SITE_MOTTO": _TRIGGER})
    evaluation = evaluator.run(inputs_for(evaluator, {}, environment), given)
    assert evaluation.values["site.motto"] == _MOTTO
    assert evaluation.notes[-1] == _NOTE.replace("{site.motto}", _MOTTO)
    compare(evaluator, {}, environment, strict=True)
    compare(evaluator, {}, Environment(), strict=True)


#: Note rules sharing their first test (nested under one ``if`` in the generated code), one of them
#: between others that do not share it, and a shared test that raises for a variable that is not a number.
_SHARED = "\n".join(
    [
        *(
            f'[[rule]]\nid = "site.shared.{i}"\nstage = "placed"\n'
            f'when = {{ "var.A_LIMIT" = {{ gt = 1 }}, "var.SITE_{i}" = {{ set = true }} }}\n'
            f'note = "site note {i}"\n'
            for i in range(3)
        ),
        '[[rule]]\nid = "site.alone"\nstage = "placed"\nwhen = { "var.A_LIMIT" = { gt = 1 } }\nnote = "limit"\n',
        '[[rule]]\nid = "site.other"\nstage = "placed"\nwhen = { "var.SITE_OTHER" = { set = true } }\nnote = "other"\n',
        *(
            f'[[rule]]\nid = "site.again.{i}"\nstage = "placed"\n'
            f'when = {{ "var.A_LIMIT" = {{ gt = 1 }}, "var.SITE_{i}" = {{ set = false }} }}\n'
            f'note = "again {i}"\n'
            for i in range(2)
        ),
    ]
)


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"A_LIMIT": "2"},
        {"A_LIMIT": "2", "SITE_1": "x", "SITE_OTHER": "y"},
        {"A_LIMIT": "1", "SITE_0": "x"},
        {"A_LIMIT": "many", "SITE_2": "x"},
        {"SITE_OTHER": "y", "SITE_0": "x"},
    ],
)
def test_note_rules_sharing_a_first_test_decide_alike(tmp_path: Path, variables: dict[str, str]) -> None:
    site = tmp_path / "shared.toml"
    site.write_text(_SHARED, encoding="utf-8")
    evaluator = Evaluator(load_rules([site]))
    warm_up(evaluator)
    # Every rule needs a variable set (its first test on var.A_LIMIT or var.SITE_OTHER fails when
    # unset): the run is tried only for the variables a snapshot has.
    assert evaluator.generated_source is not None and "if gp:" in evaluator.generated_source
    compare(evaluator, {}, Environment(variables=variables), strict=True)
    if variables.get("A_LIMIT") == "2" and "SITE_1" in variables:
        notes = evaluator.run(inputs_for(evaluator, {}, Environment(variables=variables)), given).notes
        assert sorted(notes) == ["again 0", "limit", "other", "site note 1"]
    if variables.get("A_LIMIT") == "many":
        with pytest.raises(ResolutionError, match="A_LIMIT='many' is not an integer"):
            evaluator.run(inputs_for(evaluator, {}, Environment(variables=variables)), given)


def _inert(count: int, *, conflict: bool = False) -> str:
    """Site rules that each need a variable of their own set, after a test they share."""
    kind = 'conflict = "site {i} conflicts"\nhint = "unset SITE_{i}"' if conflict else 'note = "site {i} noted"'
    return "\n".join(
        f'[[rule]]\nid = "site.{i}"\nstage = "placed"\n'
        f'when = {{ "var.SITE_{i}" = {{ set = true }}, num_devices = {{ gt = 0 }} }}\n' + kind.format(i=i) + "\n"
        for i in range(count)
    )


def _gated_evaluator(tmp_path: Path, rules: str) -> Evaluator:
    """An evaluator of the built-in table and ``rules``, warmed up: its generated code tries the
    rules that need their own variable only where a run has it (``if gp:``)."""
    site = tmp_path / "site.toml"
    site.write_text(rules, encoding="utf-8")
    evaluator = Evaluator(load_rules([site]))
    warm_up(evaluator)
    assert evaluator.generated_source is not None and "if gp:" in evaluator.generated_source
    return evaluator


@pytest.mark.parametrize(
    "variables",
    [{}, {"SITE_3": "x"}, {"SITE_0": "x", "SITE_7": "", "SITE_5": "y", "OTHER": "z"}, {"SITE_99": "x"}],
)
def test_site_rules_needing_their_own_variable_decide_alike(tmp_path: Path, variables: dict[str, str]) -> None:
    evaluator = _gated_evaluator(tmp_path, _inert(8))
    compare(evaluator, {}, Environment(variables=variables), strict=True)
    environment = Environment(variables=variables)
    plan = InputPlan(evaluator.table)
    for present in (None, plan.present(environment)):
        run = evaluator.run(inputs_for(evaluator, {}, environment), given, present=present)
        assert [n for n in run.notes if n.startswith("site")] == [
            f"site {i} noted" for i in range(8) if f"SITE_{i}" in variables
        ]


def test_site_conflicts_needing_their_own_variable_decide_alike(tmp_path: Path) -> None:
    evaluator = _gated_evaluator(tmp_path, _inert(6, conflict=True))
    for variables in ({}, {"SITE_4": "x"}, {"OTHER": "x"}):
        compare(evaluator, {}, Environment(variables=variables), strict=True)
    with pytest.raises(ResolutionError, match="site 4 conflicts"):
        evaluator.run(inputs_for(evaluator, {}, Environment(variables={"SITE_4": "x"})), given)


def _setters(count: int) -> str:
    """Site rules that each set one slot where a variable of their own is set (the highest priority wins)."""
    declared = '[slot."site.flavour"]\nstage = "resolved"\ntype = "str"\nnullable = true\n'
    return declared + "\n".join(
        f'[[rule]]\nid = "site.flavour.{i}"\nstage = "resolved"\npriority = {i}\n'
        f'when = {{ "var.SITE_{i}" = {{ set = true }}, num_devices = {{ gt = 0 }} }}\n'
        f'set = {{ "site.flavour" = "flavour {i}" }}\nwhy = "SITE_{i} is set"\n'
        for i in range(count)
    )


@pytest.mark.parametrize(
    "variables", [{}, {"SITE_3": "x"}, {"SITE_0": "x", "SITE_5": "", "OTHER": "z"}, {"SITE_99": "x"}]
)
def test_site_setters_needing_their_own_variable_decide_alike(tmp_path: Path, variables: dict[str, str]) -> None:
    evaluator = _gated_evaluator(tmp_path, _setters(8))
    compare(evaluator, {}, Environment(variables=variables), strict=True)
    environment = Environment(variables=variables)
    present = [int(name[5:]) for name in variables if name.startswith("SITE_") and int(name[5:]) < 8]
    for given_present in (None, InputPlan(evaluator.table).present(environment)):
        run = evaluator.run(inputs_for(evaluator, {}, environment), given, present=given_present)
        assert run.values["site.flavour"] == (f"flavour {max(present)}" if present else None)
        if present:
            assert run.provenance["site.flavour"].rule == f"site.flavour.{max(present)}"


@pytest.mark.parametrize("rules", [_inert, _setters])
def test_site_rules_add_no_inputs_to_each_run(tmp_path: Path, rules: Any) -> None:
    """A run reads as many inputs (the line that reads them all) with 8 or 80 such rules: rules
    whose variable a snapshot lacks cost it nothing but their shared test."""
    prologues = []
    for count in (8, 80):
        path = tmp_path / f"site{count}.toml"
        path.write_text(rules(count), encoding="utf-8")
        evaluator = Evaluator(load_rules([path]))
        warm_up(evaluator)
        assert evaluator.generated_source is not None
        prologues.append(len(evaluator.generated_source.splitlines()[1].split(" = ")[0].split(", ")))
    assert prologues[0] == prologues[1]  # as many locals read (the same inputs, numbered differently)
