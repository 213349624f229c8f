"""The evaluator: runs a compiled rule table over input values, stage by stage.

The engine knows slots, rules and stages, nothing about accelerators or clusters. Each stage
decides its slots in the graph's order (for each slot, the first rule that fires in priority
order wins; otherwise the slot's default), then runs its checks (conflict and note rules), then
verifies its slots' types and domains. Everything a person may want to watch goes through a
:class:`~resolver._engine.reporter.Reporter`.

Evaluation is compiled ahead, once per table. Each slot's setters become one closure specialised
per rule (:mod:`resolver._engine.steps`: how the rule gets its value, a constant, another slot or a
registered function), trying the rules in order; slots no rule sets take their defaults in one
step. What verifying a stage would check is proven at compile time where it can be (constants,
defaults, a slot copied from a slot that was verified against the same or a narrower type and
domain), so only values that may be wrong are checked. The first runs of a table use these
closures; after :data:`GENERATE_AFTER` of them the table is written out as one generated function
(:mod:`resolver._engine.codegen`) that every later run without a reporter uses, handing the run
back to the closures (the reference) on anything unusual. Provenance is built only when asked
for. No rule text is ever evaluated as code.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from resolver._engine.compiled import CompiledRule, CompiledTable, DomainRef, Template
from resolver._engine.conditions import Call, NotANumber, Ref
from resolver._engine.errors import ConflictError, ResolutionError, Side
from resolver._engine.provenance_map import DEFAULT as _DEFAULT
from resolver._engine.provenance_map import ProvenanceMap
from resolver._engine.reporter import Reporter
from resolver._engine.slot_types import MACHINE_PREFIXES
from resolver._engine.stage_values import field_name, stage_class
from resolver._engine.steps import (
    NO_TYPE,
    CallFailed,
    Choice,
    Predicate,
    SlotCheck,
    Step,
    check_of,
    choice_for,
    passes,
    step_for,
    tests_of,
    verify_value,
)
from resolver._engine.values import Provenance, display

if TYPE_CHECKING:
    from resolver._engine.codegen import CompileCode, Generated

__all__ = ["GENERATE_AFTER", "Evaluation", "Evaluator", "display"]

#: The origin of an input the caller gave (inputs are not in ``origins``).
_GIVEN: Any = object()


class _StageProgram(NamedTuple):
    name: str
    #: Slots no rule can set, with their defaults: assigned in one step.
    defaults: dict[str, Any]
    default_origins: dict[str, None]
    #: The other slots, in the graph's order, each with its step.
    steps: tuple[tuple[str, Step], ...]
    #: Every slot in order (defaults included), for runs that report each decision.
    all_steps: tuple[tuple[str, Step], ...]
    #: The stage's checks, each with its tests; every one whose tests hold fires, in order.
    checks: tuple[tuple[CompiledRule, tuple[Predicate, ...]], ...]
    #: When the stage is verified slot by slot in order (see ``_stage_program``): ``(slot, check,
    #: whether its default needs checking, the exact type and the domain members that pass at once)``.
    verify: tuple[tuple[str, SlotCheck, bool, type, frozenset[str] | None], ...] | None
    #: Otherwise, the check of each slot a step may mark as pending.
    checks_of: dict[str, tuple[SlotCheck, type, frozenset[str] | None]]
    #: What the steps were made from, for the generated code: ``(slot, its choices in priority
    #: order, default, default_needs)``.
    decisions: tuple[tuple[str, tuple[Choice, ...], Any, bool], ...]


class Evaluation:
    """The outcome of a successful run: every slot's value and provenance, plus notes."""

    __slots__ = ("values", "provenance", "notes", "_evaluator")

    def __init__(
        self,
        evaluator: Evaluator,
        values: Mapping[str, Any],
        provenance: Mapping[str, Provenance],
        notes: tuple[str, ...],
    ) -> None:
        self._evaluator = evaluator
        self.values = values
        self.provenance = provenance
        self.notes = notes

    @property
    def stages(self) -> tuple[Any, ...]:
        """Each stage's slots as a frozen typed value, in stage order."""
        return tuple(self._evaluator.stage_value(plan.name, self.values) for plan in self._evaluator.table.stages)


#: Runs of a table by its closures before its code is generated, on the next run. Generating costs a
#: new process about 5 ms (built-in table, 2-core machine) and then saves about 60 us a run (80 us by
#: the closures, 19 generated), so it pays for itself after about 80 runs. A process that resolves
#: more than once mostly does so a few times (a script, a notebook, a test) or hundreds of times (a
#: sweep, a golden run): after 16 runs, the first never pay for generating and the second pay about
#: 1 ms of closure runs more than generating at once (``tests/benchmarks/resolve_count.py``).
GENERATE_AFTER = 16


class Evaluator:
    """Evaluates one compiled table; build once per table, call :meth:`run` per resolution."""

    def __init__(self, table: CompiledTable, *, compile_code: CompileCode | None = None) -> None:
        """``compile_code`` compiles the generated evaluation's source (:func:`resolver._engine.codegen.generate`)."""
        self.table = table
        self._compile_code = compile_code
        self._stage_classes: dict[str, type] = {}
        #: Inputs are given by the caller; a missing one takes its slot's default.
        self._input_slots = frozenset(table.stages[0].slots) if table.stages else frozenset()
        #: Inputs the snapshot does not fill (``Environment.inputs`` gives every env./file./var. one).
        self._other_inputs = tuple(s for s in sorted(self._input_slots) if not s.startswith(MACHINE_PREFIXES))
        self._other_input_set = frozenset(self._other_inputs)
        #: Every decided slot in the order the stages decide them (the provenance's order).
        self._decided = tuple(s for plan in table.stages for s in plan.slots if s not in self._input_slots)
        #: What verifying each decided slot guarantees (inputs are not verified: they guarantee nothing).
        self._guarantees = {name: check for name in self._decided if (check := check_of(table, name)) is not None}
        # The first runs use the closures; the code is generated once they have run GENERATE_AFTER
        # times (see ``run``), so a process that resolves a few times (the CLI, a launched rank, a
        # script) does not pay for generating it.
        self._stages = tuple(self._stage_program(plan, self._guarantees) for plan in table.stages)
        self._runs = 0
        self._generated: Generated | None = None
        #: The generated code's source (for tests and the curious); None until it is generated.
        self.generated_source: str | None = None

    @property
    def generated(self) -> Generated | None:
        """The generated evaluation (:mod:`resolver._engine.codegen`), after :data:`GENERATE_AFTER` runs: ``run(values,
        notes, origins)`` decides in place and raises on anything unusual (``run`` then uses the closures)."""
        return self._generated

    def _stage_program(self, plan: Any, guarantees: Mapping[str, SlotCheck]) -> _StageProgram:
        table = self.table
        checked: dict[str, tuple[SlotCheck, bool, type, frozenset[str] | None]] = {}
        for name in plan.slots:
            check = check_of(table, name)
            if check is not None:
                # Values of exactly the expected type (and text in the domain) pass without a call.
                exact = check[1][0] if check[1] is not None and check[1][0] is not Mapping else NO_TYPE
                default_needs = not passes(table.slots[name].default, *check[1:])
                checked[name] = (check, default_needs, exact, check[2] if exact is str else None)
        defaults: dict[str, Any] = {}
        steps: list[tuple[str, Step]] = []
        all_steps: list[tuple[str, Step]] = []
        decisions: list[tuple[str, tuple[Choice, ...], Any, bool]] = []
        # Slots whose value is checked whatever decides it: inputs (when their default would not
        # pass: the default shows what the slot is meant to hold) and slots no rule sets whose
        # default fails. Then the whole stage is verified in order; otherwise only the values the
        # steps mark as pending (set by a rule not proven to pass, or a default that fails).
        in_order = False
        for slot in plan.slots:
            setters = plan.setters.get(slot, ())
            found = checked.get(slot)
            default_needs = found is not None and found[1]
            if slot in self._input_slots or not setters:
                in_order = in_order or default_needs
            if slot in self._input_slots:
                continue
            default = table.slots[slot].default
            check = guarantees.get(slot)
            choices = tuple(choice_for(rule, slot, check, guarantees) for rule in setters)
            entries = tuple((choice, tests_of(choice.rule.when)) for choice in choices)
            step = step_for(slot, entries, default, default_needs, self._add_note)
            all_steps.append((slot, step))
            if setters:
                steps.append((slot, step))
                decisions.append((slot, choices, default, default_needs))
            else:
                defaults[slot] = default
        verify = tuple(
            (name, check, default_needs, exact, members)
            for name, (check, default_needs, exact, members) in checked.items()
        )
        checks = tuple((rule, tests_of(rule.when)) for rule in plan.checks)
        return _StageProgram(
            plan.name,
            defaults,
            dict.fromkeys(defaults),
            tuple(steps),
            tuple(all_steps),
            checks,
            verify if in_order else None,
            {name: (check, exact, members) for name, (check, _, exact, members) in checked.items()},
            tuple(decisions),
        )

    @property
    def decided_slots(self) -> tuple[str, ...]:
        """The slots a run decides, in order (each run writes every one of them)."""
        return self._decided

    @property
    def other_inputs(self) -> tuple[str, ...]:
        """The inputs the snapshot does not fill (the flags), by name."""
        return self._other_inputs

    def render(self, template: Template | None, values: Mapping[str, Any]) -> str | None:
        if template is None:
            return None
        if len(template.parts) == 1 and type(template.parts[0]) is str:
            return template.text
        out = []
        for part in template.parts:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, DomainRef):
                out.append(", ".join(sorted(self.table.domains[part.domain])))
            else:
                value = values.get(part.slot)
                out.append("unset" if value is None else display(value))
        return "".join(out)

    def run(
        self,
        values: dict[str, Any],
        inputs: Mapping[str, Provenance] | Callable[[str], Provenance | None],
        reporter: Reporter | None = None,
        present: Collection[str] | None = None,
        *,
        complete: bool = False,
    ) -> Evaluation:
        """Decide every slot. ``values`` holds the inputs and is filled in place.

        ``values`` must hold the snapshot's inputs (:meth:`Environment.inputs`); a missing ``arg.*``
        input takes its slot's default (``complete``: none is missing, so none is looked for).
        ``present``: the variable and file inputs that may be set
        (:meth:`InputPlan.present <resolver._snapshot.environment.InputPlan.present>`: those the snapshot has;
        more is allowed; empty: none is set, and the generated code takes them all as unset without
        reading them); None: the generated code looks at every one its rules need.
        """
        if self._generated is None and self._runs <= GENERATE_AFTER:
            self._runs += 1
            if self._runs > GENERATE_AFTER:  # from now on, the generated code
                self._generated = self._generate()
        given: dict[str, None] = {}  # inputs the caller left out: their defaults
        if not complete and not self._other_input_set <= values.keys():
            for slot in self._other_inputs:
                if slot not in values:
                    values[slot] = self.table.slots[slot].default
                    given[slot] = None
        if reporter is None and self._generated is not None:
            notes: list[str] = []
            try:
                self._generated(values, notes, present)
            except Exception:  # noqa: BLE001 - anything unusual: the closures decide again, and say why
                pass
            else:
                return Evaluation(self, values, ProvenanceMap(self, values, inputs, None, given), tuple(notes))
        return self._interpret(values, inputs, reporter, given)

    def _generate(self) -> Generated | None:
        """The generated evaluation; None (the closures go on deciding) if it cannot be made."""
        # imported here: a process that resolves once (a CLI command, a launched rank) never writes code
        from resolver._engine.codegen import generate

        try:
            # Variables and files are unset unless a snapshot has them: rules needing one are
            # tried only for those a run has.
            sparse = frozenset(self.table.variables) | {s for s in self._input_slots if s.startswith("file.")}
            run, self.generated_source = generate(
                self._stages, self.table.domains, self._add_note, self.render, self._compile_code, sparse
            )
        except Exception:  # noqa: BLE001 - only speed is lost; test_codegen.py makes sure it is not
            return None
        return run

    def replay(self, values: Mapping[str, Any], given: Mapping[str, None]) -> dict[str, Choice | None]:
        """Which rule decided each slot of a finished run (its ``values``), found by the closures."""
        copy = dict(values)  # each decided slot is written before anything reads it again
        origins: dict[str, Choice | None] = dict(given)
        notes: list[str] = []
        pending: list[str] = []
        for stage in self._stages:
            copy.update(stage.defaults)
            origins.update(stage.default_origins)
            for slot, step in stage.steps:
                origins[slot] = step(copy, notes, pending)
        return origins

    def _interpret(
        self,
        values: dict[str, Any],
        inputs: Mapping[str, Provenance] | Callable[[str], Provenance | None],
        reporter: Reporter | None,
        given: Mapping[str, None],
    ) -> Evaluation:
        """The reference evaluation: each slot's closure, then the stage's checks and verification."""
        stages = self._stages
        origins: dict[str, Choice | None] = dict(given)
        provenance = ProvenanceMap(self, values, inputs, origins)
        notes: list[str] = []
        pending: list[str] = []
        check: CompiledRule | None = None
        try:
            for stage in stages:
                if reporter is None:
                    values.update(stage.defaults)
                    origins.update(stage.default_origins)
                    for slot, step in stage.steps:
                        origins[slot] = step(values, notes, pending)
                else:
                    for slot, step in stage.all_steps:
                        origins[slot] = step(values, notes, pending)
                        reporter.decided(slot, values[slot], provenance[slot])
                if stage.checks:
                    for check, tests in stage.checks:
                        for test in tests:
                            if not test(values):
                                break
                        else:
                            self._fire(check, values, notes, provenance, reporter)
                    check = None
                if stage.verify is not None:
                    for slot, slot_check, default_needs, exact, members in stage.verify:
                        choice = origins.get(slot, _GIVEN)
                        if default_needs if choice is None or choice is _GIVEN else choice.verify:
                            value = values[slot]
                            if type(value) is not exact or (members is not None and value not in members):
                                verify_value(stage.name, slot_check, value)  # the full check; raises if wrong
                elif pending:
                    checks_of = stage.checks_of
                    for slot in pending:  # in the stage's order: the steps ran in it
                        slot_check, exact, members = checks_of[slot]
                        value = values[slot]
                        if type(value) is not exact or (members is not None and value not in members):
                            verify_value(stage.name, slot_check, value)
                pending.clear()
                if reporter is not None:
                    reporter.stage_finished(stage.name, self.stage_value(stage.name, values))
        except NotANumber as exc:
            rule = check if check is not None else getattr(exc, "_resolver_rule", None)
            raise ResolutionError(exc.message, hint=exc.hint, rule=rule.id if rule else None) from None
        except CallFailed as failed:
            raise self._call_error(failed, values, provenance) from None
        return Evaluation(self, values, provenance, tuple(notes))

    def stage_value(self, stage: str, values: Mapping[str, Any]) -> Any:
        """One stage's slots as a frozen attrs instance (``PlacedStage(num_devices=2, ...)``), its
        class made once per evaluator (:mod:`resolver._engine.stage_values`)."""
        plan = next(p for p in self.table.stages if p.name == stage)
        cls = self._stage_classes.get(stage)
        if cls is None:
            cls = self._stage_classes[stage] = stage_class(stage)
        return cls(tuple((field_name(s), values[s]) for s in plan.slots))

    # -- pieces ---------------------------------------------------------------------------------

    def _fire(
        self,
        check: CompiledRule,
        values: Mapping[str, Any],
        notes: list[str],
        provenance: Mapping[str, Provenance],
        reporter: Reporter | None,
    ) -> None:
        """A check's conditions hold: raise its conflict, or add its note."""
        if check.conflict is not None:
            error = self._conflict(check, values, provenance)
            if reporter is not None:
                reporter.failed(error)
            raise error
        note = self.render(check.templates.get("note"), values)
        notes.append(note)  # type: ignore[arg-type]
        if reporter is not None:
            reporter.noted(check.id, note)  # type: ignore[arg-type]

    def _add_note(self, template: Template, values: Mapping[str, Any], notes: list[str]) -> None:
        note = self.render(template, values)
        if note not in notes:
            notes.append(note)  # type: ignore[arg-type]

    def _call_error(
        self, failed: CallFailed, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> ResolutionError:
        refs = [a.slot for a in failed.expr.args if isinstance(a, Ref)]
        sides = tuple(Side(s, values.get(s), provenance.get(s, _DEFAULT)) for s in refs)
        message = failed.error.message
        if len(refs) == 1:
            label = _input_label(self.table, refs[0])
            if label not in message:
                message = f"{label}: {message}"
        return ResolutionError(message, hint=failed.error.hint, rule=failed.rule.id, sides=sides)

    def provenance_of(
        self, choice: Choice, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> Provenance:
        rule, expr = choice.rule, choice.expr
        why = self.render(rule.templates.get("why"), values)
        inputs = tuple((s, values.get(s)) for s in rule.reads)
        origin = None
        if isinstance(expr, Ref):
            origin = provenance.get(expr.slot)
        elif isinstance(expr, Call):
            refs = [a.slot for a in expr.args if isinstance(a, Ref)]
            if len(refs) == 1:
                origin = provenance.get(refs[0])
        if origin is not None and origin.kind != "rule":
            return Provenance(origin.kind, origin.source, rule.id, why, inputs)
        return Provenance("rule", None, rule.id, why or "", inputs)

    def _conflict(
        self, rule: CompiledRule, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> ConflictError:
        sides = tuple(Side(s, values.get(s), provenance.get(s, _DEFAULT)) for s in rule.between)
        return ConflictError(
            self.render(rule.templates.get("conflict"), values) or "",
            rule=rule.id,
            sides=sides,
            hint=self.render(rule.templates.get("hint"), values),
        )


def _input_label(table: CompiledTable, slot: str) -> str:
    """How a user knows an input: a variable by its name, a flag by its name, else the slot."""
    variable = table.variables.get(slot)
    if variable is not None:
        return variable
    return slot.removeprefix("arg.")
