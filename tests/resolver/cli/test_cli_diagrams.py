"""Pictures of decisions: `explain --format dot` (parsed as Graphviz DOT) and docs/rules.md's Mermaid."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET

import networkx as nx
import pydot
import pytest

from resolver.api import builtin_table
from tests.support.cli_support import ROOT, run_resolver

# pydot's grammar still calls pyparsing's old camelCase names
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated.*:DeprecationWarning")

DOC_EXAMPLE = "resolver explain --devices 4 --simulate cuda=8,slurm --format dot"


def parse_dot(text: str) -> tuple[nx.DiGraph, dict[str, str]]:
    """Parse with pydot (a DOT grammar): returns the edges as a graph, and each node's label."""
    graphs = pydot.graph_from_dot_data(text)
    assert graphs is not None and len(graphs) == 1, "not valid DOT"
    dot = graphs[0]
    labels: dict[str, str] = {}
    for sub in dot.get_subgraphs():
        for node in sub.get_nodes():
            labels[node.get_name().strip('"')] = node.get_label().strip('"').replace("\\n", " ")
    graph = nx.DiGraph()
    graph.add_nodes_from(labels)
    for edge in dot.get_edges():
        graph.add_edge(edge.get_source().strip('"'), edge.get_destination().strip('"'))
    assert set(graph.nodes) == set(labels), "every edge joins declared nodes"
    return graph, labels


def explain_dot(*args: str) -> subprocess.CompletedProcess[str]:
    return run_resolver("explain", *args, "--format", "dot")


def test_dot_of_a_resolution_chains_flags_rules_and_fields():
    result = explain_dot("--devices", "2", "--strategy", "ddp", "--simulate", "")
    assert result.returncode == 0, result.stderr
    graph, labels = parse_dot(result.stdout)
    assert labels["slot:arg.devices"] == "arg.devices = 2"
    assert labels["slot:num_devices"] == "num_devices = 2"
    assert labels["slot:launcher"] == "launcher = subprocess"
    assert labels["rule:launcher.script"].startswith("rule launcher.script: ")
    # the flag, the rule that read it, the slot it set, and on to the resolved fields
    assert nx.has_path(graph, "slot:arg.devices", "slot:num_devices")
    assert nx.has_path(graph, "slot:arg.strategy", "slot:launcher")
    for field in ("accelerator", "strategy", "world_size", "precision", "process_group_backend"):
        assert f"slot:{field}" in graph
    for node in graph:
        if node.startswith("rule:"):
            assert graph.out_degree(node) >= 1, f"{node} decided nothing"
    assert "error" not in graph


def test_dot_reads_the_machine_facts():
    graph, labels = parse_dot(explain_dot("--simulate", "cuda=2").stdout)
    assert labels["slot:env.cuda_device_count"] == "env.cuda_device_count = 2"
    assert graph.has_edge("slot:env.cuda_device_count", "rule:accelerator.auto.cuda")
    assert graph.has_edge("rule:accelerator.auto.cuda", "slot:accelerator")


def test_dot_of_a_conflict_points_both_sides_at_the_error():
    result = explain_dot("--devices", "4", "--simulate", "cuda=8,slurm")
    assert result.returncode == 1
    assert result.stderr.startswith("error[slurm.tasks_per_node_vs_devices]:")
    graph, labels = parse_dot(result.stdout)
    assert labels["error"].startswith("error[slurm.tasks_per_node_vs_devices]: SLURM runs 8 task(s)")
    assert "help: make them agree" in labels["error"]
    assert graph.has_edge("slot:var.SLURM_NTASKS_PER_NODE", "error")
    assert graph.has_edge("slot:num_devices", "error")
    assert labels["slot:var.SLURM_NTASKS_PER_NODE"] == "var.SLURM_NTASKS_PER_NODE = 8"
    assert nx.has_path(graph, "slot:arg.devices", "error")


def test_dot_shows_notes():
    graph, labels = parse_dot(explain_dot("--simulate", "cuda=2,interactive").stdout)
    notes = [n for n in graph if n.startswith("note:")]
    assert notes and any("interactive" in labels[n] for n in notes)
    assert all(graph.in_degree(n) >= 1 for n in notes)


def test_dot_verbose_adds_every_intermediate_decision():
    small, _ = parse_dot(explain_dot("--devices", "2", "--simulate", "").stdout)
    full, labels = parse_dot(explain_dot("--devices", "2", "--simulate", "", "--verbose").stdout)
    assert set(small) < set(full)
    assert "slot:plugin.unknown" in full and "slot:plugin.unknown" not in small


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (apt-get install graphviz)")
def test_graphviz_renders_it(tmp_path):
    source = explain_dot("--devices", "4", "--simulate", "cuda=8,slurm").stdout
    svg = subprocess.run(["dot", "-Tsvg"], input=source, capture_output=True, text=True, timeout=60, check=True)
    root = ET.fromstring(svg.stdout[svg.stdout.index("<svg") :])
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "error[slurm.tasks_per_node_vs_devices]:" in texts


def test_docs_example_is_current():
    """docs/decision-graph.dot is what the command documented in docs/usage.md prints today."""
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert f"{DOC_EXAMPLE} > docs/decision-graph.dot" in usage
    assert "decision-graph.svg" in usage
    current = run_resolver(*shlex.split(DOC_EXAMPLE)[1:]).stdout
    committed = (ROOT / "docs" / "decision-graph.dot").read_text()
    assert committed == current, "regenerate docs/decision-graph.dot and .svg as docs/usage.md says"


def test_docs_svg_shows_the_committed_graph():
    svg = (ROOT / "docs" / "decision-graph.svg").read_text()
    root = ET.fromstring(svg[svg.index("<svg") :])
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    _, labels = parse_dot((ROOT / "docs" / "decision-graph.dot").read_text())
    for label in labels.values():
        assert label.split(" ")[0] in texts, f"{label!r} is not in the SVG: re-render it"


# -- docs/rules.md ----------------------------------------------------------------------------

MERMAID_LINE = re.compile(
    r'^(flowchart LR|  \w+\["[^"]+"\]|  \w+\(\["[^"]+"\]\)|  subgraph \w+ \["[^"]+"\]|    \w+\["[^"]+"\]|  end'
    r"|  \w+ --> \w+)$"
)


def mermaid_blocks() -> list[list[str]]:
    text = (ROOT / "docs" / "rules.md").read_text()
    return [block.strip("\n").splitlines() for block in re.findall(r"```mermaid\n(.*?)```", text, re.S)]


def mermaid_graph(lines: list[str]) -> tuple[nx.DiGraph, dict[str, str]]:
    for line in lines:
        assert MERMAID_LINE.match(line), f"not a Mermaid line this generator writes: {line!r}"
    labels = {m[1]: m[2] for m in (re.match(r'\s+(\w+)\(?\["([^"]+)"\]', line) for line in lines) if m}
    graph = nx.DiGraph()
    for line in lines:
        if "-->" in line:
            a, b = line.split(" --> ")
            assert a.strip() in labels and b.strip() in labels, f"undeclared node in {line!r}"
            graph.add_edge(labels[a.strip()], labels[b.strip()])
    assert lines.count("  end") == sum(1 for line in lines if line.startswith("  subgraph"))
    return graph, labels


def test_rules_doc_draws_the_stage_pipeline():
    pipeline, _ = mermaid_graph(mermaid_blocks()[0])
    stages = [plan.name for plan in builtin_table().stages]
    chain = [next(label for label in pipeline if label.startswith(f"{stage}<br/>")) for stage in stages]
    assert list(nx.topological_sort(pipeline)) == [*chain, "ResolvedConfig"]


def test_rules_doc_draws_the_slot_dependency_graph():
    slots, _ = mermaid_graph(mermaid_blocks()[1])
    table = builtin_table()
    for rule in table.rules.values():
        for target, _ in rule.sets:
            for source in rule.reads:
                if source != target:
                    assert slots.has_edge(source, target), (rule.id, source, target)
    assert slots.has_edge("arg.devices", "flag.devices")
    assert slots.has_edge("var.SLURM_NTASKS", "world_size") or nx.has_path(slots, "var.SLURM_NTASKS", "world_size")
    assert nx.is_directed_acyclic_graph(slots)
    assert len(slots.edges) < 500, "GitHub's Mermaid refuses graphs with more than 500 edges"
