"""Check step 2: every rank's resolved config and machine facts, compared before any collective.

Each rank puts its facts (the config fields that are the same on every rank of a sound run, the
torch/CUDA/NCCL versions, device counts, and the variables the rule table reads) into the
rendezvous store; every rank then reads them all and computes the same verdict, so all ranks
agree on whether the collectives can be tried at all.
"""

from __future__ import annotations

import json
import os
import platform
import socket
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from resolver import ResolvedConfig
from runtime.preflight.report import FAIL, OK, Check

__all__ = ["compare", "exchange", "rank_facts"]

FACTS = "check/facts/"

#: Config fields that differ between the ranks of a sound run.
_PER_RANK_FIELDS = {"global_rank", "local_rank", "node_rank", "provenance", "notes", "flags"}
#: Variables that name the rank itself: different on every rank by design.
_PER_RANK_VARIABLES = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "ROLE_RANK", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK",
    "HOROVOD_CROSS_RANK", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK", "PMI_RANK", "PMIX_RANK",
}  # fmt: skip
#: Differences in these make the ranks build different groups: the collectives would hang or mix runs.
_BLOCKING = {"config.world_size", "config.num_nodes", "config.collective", "config.process_group_backend",
             "config.main_address", "config.main_port", "config.strategy", "config.launcher"}  # fmt: skip


def _variables() -> dict[str, str]:
    """The variables the built-in rule table reads (``Environment.probe`` keeps exactly those)."""
    from resolver.api import builtin_table

    table = builtin_table()
    names = set(table.variables.values()) | {"OMP_NUM_THREADS"}
    return {name: os.environ[name] for name in sorted(names - _PER_RANK_VARIABLES) if name in os.environ}


def rank_facts(config: ResolvedConfig) -> dict[str, str]:
    """What this rank resolved and runs on, as ``{what: value}`` text."""
    facts: dict[str, str] = {}
    for name, value in sorted(config.to_dict(with_provenance=False).items()):
        if name not in _PER_RANK_FIELDS:
            facts[f"config.{name}"] = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    facts["python"] = platform.python_version()
    facts["torch"] = torch.__version__
    facts["torch.cuda"] = str(torch.version.cuda)
    nccl = "none"
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # a build without NCCL
            nccl = "none"
    facts["nccl"] = nccl
    facts["cuda devices"] = str(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    facts["threads"] = str(torch.get_num_threads())
    for name, value in _variables().items():
        facts[f"${name}"] = value
    visible = facts.pop("$CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        # schedulers bind each task to its own GPUs (SLURM --gpus-per-task): the ids differ by
        # design, how many a rank sees must not
        count = len([part for part in visible.split(",") if part.strip()])
        facts["$CUDA_VISIBLE_DEVICES (devices listed)"] = str(count)
    return facts


def exchange(store: dist.TCPStore, rank: int, world_size: int, facts: Mapping[str, str],
             timeout: float) -> dict[int, dict[str, Any]]:  # fmt: skip
    """Every rank's ``{"host", "facts"}``, through the store (waits at most ``timeout``)."""
    store.set(f"{FACTS}{rank}", json.dumps({"host": socket.gethostname(), "facts": dict(facts)}))
    keys = [f"{FACTS}{r}" for r in range(world_size)]
    store.wait(keys, timedelta(seconds=timeout))
    return {r: json.loads(store.get(key)) for r, key in enumerate(keys)}


def compare(everyone: Mapping[int, Mapping[str, Any]], rank: int, seconds: float = 0.0) -> Check:
    """The agreement check from every rank's facts: a table of what differs, by rank and host.

    The ranks outside the largest group (rank 0's group on a tie) are blamed for each difference.
    """
    hosts = {r: str(data["host"]) for r, data in everyone.items()}
    keys = sorted({key for data in everyone.values() for key in data["facts"]})
    rows: list[tuple[str, str, str]] = []
    blamed: set[int] = set()
    blocking = False
    for key in keys:
        groups: dict[str, list[int]] = {}
        for r in sorted(everyone):
            groups.setdefault(everyone[r]["facts"].get(key, "(unset)"), []).append(r)
        if len(groups) < 2:
            continue
        blocking |= key in _BLOCKING
        majority = max(groups.values(), key=lambda ranks: (len(ranks), 0 in ranks))
        blamed.update(r for ranks in groups.values() if ranks is not majority for r in ranks)
        for index, (value, ranks) in enumerate(sorted(groups.items(), key=lambda item: item[1][0])):
            rows.append((key if index == 0 else "", value, _ranks_text(ranks, hosts)))
    if not rows:
        return Check("agreement", OK, f"{len(everyone)} ranks resolved the same config on the same software",
                     seconds=seconds)  # fmt: skip
    names = sorted({row[0] for row in rows if row[0]})
    detail = f"the ranks differ in {', '.join(names)}"
    if blocking:
        detail += " (collectives skipped: the ranks would not form one group)"
    fix = ("give every rank the same environment: set these variables the same way in the job script "
           "(not per node), or pass the value as a flag")  # fmt: skip
    table = [("what", "value", "ranks"), *rows]
    blame = sorted(blamed)
    return Check("agreement", FAIL, detail, blame, [hosts[r] for r in blame], fix=fix, table=table,
                 echo=rank not in blamed and rank != 0, seconds=seconds)  # fmt: skip


def _ranks_text(ranks: Sequence[int], hosts: Mapping[int, str]) -> str:
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(hosts[r], []).append(r)
    return "; ".join(f"rank {_span(rs)} ({host})" for host, rs in by_host.items())


def _span(ranks: Sequence[int]) -> str:
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))
