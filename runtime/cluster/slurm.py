"""SLURM: ``srun`` started one process per task; rank 0 runs on the first node of the job."""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment
from runtime.cluster.hostlist import first_host
from runtime.registry import register_cluster_environment

__all__ = ["SLURMEnvironment"]


@register_cluster_environment("slurm")
class SLURMEnvironment(ClusterEnvironment):
    """``MASTER_ADDR`` or the job's first node; ``MASTER_PORT`` or a port derived from the job id."""

    title = "SLURM"
    job_id_variable = "SLURM_JOB_ID"
    variables_hint = "run inside an allocation with srun, or export MASTER_ADDR and MASTER_PORT"

    @property
    def main_address(self) -> str:
        if self.config.main_address:  # resolved, with provenance (rules/37-rendezvous.toml)
            return self.config.main_address
        explicit = self.environ.get("MASTER_ADDR", "").strip()
        if explicit:
            return explicit
        nodes = self.environ.get("SLURM_JOB_NODELIST") or self.environ.get("SLURM_NODELIST")
        return first_host(nodes) if nodes else self._required("MASTER_ADDR")
