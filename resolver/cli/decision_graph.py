"""The decision graph of one resolution, as Graphviz DOT (``resolver explain --format dot``).

Nodes are the inputs a rule read (flags, variables, machine facts), the rules that decided, the
slots they decided and, when resolution failed, the error with the slots it names. Edges go from
what a rule read to the rule, and from the rule to what it set, so a path through the graph is a
chain of reasons. By default the graph holds what the resolved fields (and the error) depend on;
``everything=True`` adds every intermediate decision. Each stage of the table is one cluster.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from resolver._domain.config import DECIDED_FIELDS, Provenance, display
from resolver._engine.compiled import PLACEHOLDER, CompiledTable
from resolver._engine.errors import ResolutionError
from resolver._engine.reporter import RecordingReporter

__all__ = ["decision_graph"]

RESULT_FIELDS = DECIDED_FIELDS
_WRAP = 44

_STYLE = {
    "input": 'shape=box, style="rounded,filled", fillcolor="#e8f0fe", color="#4a6fa5"',
    "slot": 'shape=box, style=filled, fillcolor="#ffffff"',
    "result": 'shape=box, style="filled,bold", fillcolor="#d9f2d9", color="#2e7d32"',
    "rule": 'shape=ellipse, style=filled, fillcolor="#f5f5f5", color="#888888", fontsize=10',
    "note": 'shape=note, style=filled, fillcolor="#fff8dc", fontsize=10',
    "error": 'shape=octagon, style="filled,bold", fillcolor="#fde2e1", color="#c62828"',
}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, _WRAP, break_on_hyphens=False, break_long_words=False)) or text


@attrs.define
class _Graph:
    table: CompiledTable
    nodes: dict[str, tuple[str, str, str]] = attrs.field(factory=dict)  # id -> (kind, label, stage)
    edges: set[tuple[str, str, str]] = attrs.field(factory=set)  # (from, to, style)

    def node(self, node_id: str, kind: str, label: str, stage: str) -> str:
        self.nodes.setdefault(node_id, (kind, label, stage))
        return node_id

    def stage_of_slot(self, slot: str) -> str:
        found = self.table.slots.get(slot)
        return found.stage if found is not None else self.table.stages[0].name

    def stage_of_rule(self, rule: str, fallback: str) -> str:
        found = self.table.rules.get(rule)
        return found.stage if found is not None else fallback

    def render(self) -> str:
        order = {plan.name: i for i, plan in enumerate(self.table.stages)}
        lines = [
            "digraph resolution {",
            '  graph [rankdir=TB, fontname="Helvetica"];',
            '  node [fontname="Helvetica", fontsize=11];',
            '  edge [color="#555555", arrowsize=0.7];',
        ]
        by_stage: dict[str, list[str]] = {}
        for node_id, (_, _, stage) in self.nodes.items():
            by_stage.setdefault(stage, []).append(node_id)
        for stage in sorted(by_stage, key=lambda s: (order.get(s, len(order)), s)):
            lines.append(f"  subgraph {_quote('cluster_' + stage)} {{")
            lines.append(f'    label={_quote("stage " + stage)}; style=rounded; color="#bbbbbb";')
            for node_id in sorted(by_stage[stage]):
                kind, label, _ = self.nodes[node_id]
                lines.append(f"    {_quote(node_id)} [label={_quote(label)}, {_STYLE[kind]}];")
            lines.append("  }")
        for source, target, style in sorted(self.edges):
            attributes = f" [{style}]" if style else ""
            lines.append(f"  {_quote(source)} -> {_quote(target)}{attributes};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def decision_graph(
    trace: RecordingReporter,
    table: CompiledTable,
    *,
    error: ResolutionError | None = None,
    everything: bool = False,
) -> str:
    """The DOT text of the resolution ``trace`` recorded (``error``: the one it ended with)."""
    graph = _Graph(table)
    decisions = trace.decisions
    inputs_seen: dict[str, Any] = {}
    for _, provenance in decisions.values():
        inputs_seen.update(provenance.inputs)
    if error is not None:
        inputs_seen.update((side.slot, side.value) for side in error.sides)

    wanted: list[str] = list(decisions) if everything else [s for s in RESULT_FIELDS if s in decisions]
    if error is not None:
        failed = table.rules.get(error.rule or "")
        wanted += [side.slot for side in error.sides] + list(failed.reads if failed is not None else ())
    notes = [event for kind, event in trace.events if kind == "noted"]
    for rule_id, _ in notes:
        rule = table.rules.get(rule_id)
        wanted += list(rule.reads) if rule is not None else []

    done: set[str] = set()
    while wanted:
        slot = wanted.pop()
        if slot in done:
            continue
        done.add(slot)
        if slot not in decisions:
            value = inputs_seen.get(slot)
            shown = f"{slot} = {display(value)}" if slot in inputs_seen else slot
            graph.node(f"slot:{slot}", "input", shown, graph.stage_of_slot(slot))
            continue
        value, provenance = decisions[slot]
        wanted += _add_decision(graph, slot, value, provenance)

    for rule_id, text in notes:
        rule = table.rules.get(rule_id)
        stage = rule.stage if rule is not None else graph.table.stages[-1].name
        note = graph.node(f"note:{rule_id}", "note", _wrap(f"note: {text}"), stage)
        for slot in rule.reads if rule is not None else ():
            graph.edges.add((f"slot:{slot}", note, "style=dashed"))
    if error is not None:
        _add_error(graph, error, decisions)
    return graph.render()


def _add_decision(graph: _Graph, slot: str, value: Any, provenance: Provenance) -> list[str]:
    """Add a decided slot and the rule that decided it; returns the slots that rule read."""
    stage = graph.stage_of_slot(slot)
    kind = "result" if slot in RESULT_FIELDS else "slot"
    label = f"{slot} = {display(value)}"
    if provenance.rule is None:
        graph.node(f"slot:{slot}", kind, f"{label}\n({provenance.describe()})", stage)
        return []
    graph.node(f"slot:{slot}", kind, label, stage)
    rule = graph.node(
        f"rule:{provenance.rule}",
        "rule",
        _wrap(f"rule {provenance.rule}" + (f": {provenance.why}" if provenance.why else "")),
        graph.stage_of_rule(provenance.rule, stage),
    )
    graph.edges.add((rule, f"slot:{slot}", ""))
    for name, _ in provenance.inputs:
        graph.edges.add((f"slot:{name}", rule, ""))
    compiled = graph.table.rules.get(provenance.rule)
    if compiled is not None and compiled.note is not None:  # a choice made on the user's behalf
        text = _render(compiled.note, {**dict(provenance.inputs), slot: value})
        note = graph.node(f"note:{compiled.id}", "note", _wrap(f"note: {text}"), compiled.stage)
        graph.edges.add((rule, note, "style=dashed"))
    return [name for name, _ in provenance.inputs]


def _render(template: str, values: Mapping[str, Any]) -> str:
    """A note's text with its {slot} placeholders filled from the values the rule saw."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        return display(values[name]) if values.get(name) is not None else match.group(0)

    return re.sub(PLACEHOLDER, substitute, template)


def _add_error(graph: _Graph, error: ResolutionError, decisions: Mapping[str, Any]) -> None:
    """The error node, with an arrow from each side it names (bold) and each other slot its rule read."""
    head = f"error[{error.rule}]" if error.rule else "error"
    text = f"{head}: {error.message}" + (f"\nhelp: {error.hint}" if error.hint else "")
    label = "\n".join(_wrap(part) for part in text.split("\n"))
    stage = graph.stage_of_rule(error.rule or "", _failed_stage(graph.table, decisions))
    node = graph.node("error", "error", label, stage)
    rule = graph.table.rules.get(error.rule or "")
    sides = [side.slot for side in error.sides]
    for slot in _unique([*sides, *(rule.reads if rule is not None else ())]):
        style = 'color="#c62828", penwidth=2' if slot in sides else 'color="#c62828", style=dashed'
        graph.edges.add((f"slot:{slot}", node, style))


def _failed_stage(table: CompiledTable, decisions: Mapping[str, Any]) -> str:
    """The stage an error without a rule of the table happened in: after the last decided slot's."""
    stages = [plan.name for plan in table.stages]
    reached = [stages.index(table.slots[s].stage) for s in decisions if s in table.slots]
    return stages[max(reached)] if reached else stages[0]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
