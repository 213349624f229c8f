"""``resolver explain`` inside a launched rank (``RESOLVER_CONFIG`` set): after the table, what the rank's
launcher decided and why, e.g. a multi-node round's node rank and world size and the round's note.
(test_two_hosts_faults.py runs it inside a rank of a real round on two namespace hosts.)"""

from __future__ import annotations

import attrs

from resolver import Provenance, resolve
from resolver.cli import main

ROUND = ("round 2 of the c10d rendezvous at 10.0.0.1:29400: 2 node(s) (--nnodes 1:2) came (node 0 10.0.0.1, "
         "node 1 10.0.0.2); world size 2 = 2 node(s) x 1 rank(s) per node")  # fmt: skip


def _launched() -> str:
    config = resolve(accelerator="cpu", devices=1)
    why = Provenance(kind="environment", source="the c10d rendezvous at 10.0.0.1:29400", why=ROUND)
    provenance = {**config.provenance, "node_rank": why, "num_nodes": why, "world_size": why}
    placed = attrs.evolve(config, node_rank=1, num_nodes=2, world_size=2, provenance=provenance,
                          notes=(*config.notes, ROUND))  # fmt: skip
    return placed.to_json()


def test_explain_in_a_rank_of_a_round_says_which_round_which_nodes_and_why_that_world_size(monkeypatch, capsys):
    monkeypatch.setenv("RESOLVER_CONFIG", _launched())
    assert main(["explain", "--accelerator", "cpu", "--devices", "1"]) == 0
    out = capsys.readouterr().out
    launched = out.split("as launched (RESOLVER_CONFIG), where this rank's launcher decided otherwise or says why:\n")
    assert len(launched) == 2, out
    lines = launched[1].splitlines()
    assert any(line.split()[:3] == ["world_size", "2", "environment"] for line in lines), lines
    assert any(line.split()[:2] == ["node_rank", "1"] for line in lines), lines
    assert f"  - {ROUND}" in lines, lines


def test_explain_in_a_rank_with_no_flags_explains_the_rank_s_own_config(monkeypatch, capsys):
    monkeypatch.setenv("RESOLVER_CONFIG", _launched())
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("this rank's config, as its launcher placed it (RESOLVER_CONFIG; give flags to resolve")
    lines = out.splitlines()
    assert any(line.split()[:4] == ["world_size", "2", "environment", "the"] for line in lines), lines
    assert f"  - {ROUND}" in lines, lines


def test_explain_outside_a_launched_rank_shows_no_launch(monkeypatch, capsys):
    monkeypatch.delenv("RESOLVER_CONFIG", raising=False)
    assert main(["explain", "--accelerator", "cpu", "--devices", "1"]) == 0
    assert "as launched" not in capsys.readouterr().out
