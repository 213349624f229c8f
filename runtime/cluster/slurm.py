"""SLURM: ``srun`` started one process per task; rank 0 runs on the first node of the job."""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment
from runtime.cluster.hostlist import first_host
from runtime.registry import register_cluster_environment

__all__ = ["SLURMEnvironment", "port_from_job_id"]


def port_from_job_id(job_id: str) -> int:
    """A port every node of the job computes alike: 15000 + the job id's last four digits."""
    digits = "".join(ch for ch in job_id if ch.isdigit())[-4:] or "0"
    return 15000 + int(digits)


@register_cluster_environment("slurm")
class SLURMEnvironment(ClusterEnvironment):
    """``MASTER_ADDR`` or the job's first node; ``MASTER_PORT`` or a port derived from the job id."""

    title = "SLURM"
    variables_hint = "run inside an allocation with srun, or export MASTER_ADDR and MASTER_PORT"

    @property
    def main_address(self) -> str:
        explicit = self.environ.get("MASTER_ADDR", "").strip()
        if explicit:
            return explicit
        nodes = self.environ.get("SLURM_JOB_NODELIST") or self.environ.get("SLURM_NODELIST")
        return first_host(nodes) if nodes else self._required("MASTER_ADDR")

    @property
    def main_port(self) -> int:
        explicit = self.environ.get("MASTER_PORT", "").strip()
        if explicit:
            return self._port(explicit, "MASTER_PORT")
        job_id = self.environ.get("SLURM_JOB_ID", "").strip()
        return port_from_job_id(job_id) if job_id else self._port(self._required("MASTER_PORT"), "MASTER_PORT")

    @property
    def main_port_source(self) -> str:
        return "MASTER_PORT" if self.environ.get("MASTER_PORT", "").strip() else "SLURM_JOB_ID"
