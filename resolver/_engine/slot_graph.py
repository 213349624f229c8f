"""The dependency graph of a rule table (networkx): slot -> rule that reads it -> slot it sets.

Built when a table is compiled (:mod:`resolver._engine.compile` orders the slots by it) or drawn
(:meth:`resolver._engine.compiled.CompiledTable.graph`); a process served by the disk cache never imports
this module, networkx or these node classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver._engine.values import fields_repr

if TYPE_CHECKING:
    import networkx as nx

    from resolver._engine.table import Slot

__all__ = ["RuleNode", "SlotNode", "dependency_graph"]


@attrs.frozen
class SlotNode:
    """A slot in the dependency graph."""

    slot: str

    __repr__ = fields_repr


@attrs.frozen
class RuleNode:
    """A rule in the dependency graph (a rule may share its id with a slot's name)."""

    rule: str

    __repr__ = fields_repr


def dependency_graph(slots: Mapping[str, Slot], rules: Any, stage_index: Mapping[str, int]) -> nx.DiGraph:
    """Slot -> rule that reads it -> slot it sets; each node carries its stage's index."""
    import networkx as nx  # only when a table is compiled: loading from the disk cache never needs it

    graph = nx.DiGraph()
    for name, slot in slots.items():
        graph.add_node(SlotNode(name), stage=stage_index[slot.stage])
    for rule in rules:
        node = RuleNode(rule.id)
        graph.add_node(node, stage=stage_index[rule.stage])
        for name in rule.reads:
            graph.add_edge(SlotNode(name), node)
        for name, _ in rule.sets:
            graph.add_edge(node, SlotNode(name))
    return graph
