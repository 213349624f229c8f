"""IBM LSF (``jsrun``): hosts come from the job's rank file, the port from the job id."""

from __future__ import annotations

from pathlib import Path

from resolver.functions import lsf_port_from_job_id
from runtime.cluster.base import ClusterEnvironment
from runtime.errors import RuntimeConfigError

__all__ = ["LSFEnvironment"]


class LSFEnvironment(ClusterEnvironment):
    """``MASTER_ADDR`` or the first compute host in ``LSB_DJOB_RANKFILE`` (whose first line is
    the launch node, which runs no rank); ``MASTER_PORT`` or a port derived from ``LSB_JOBID`` as
    PyTorch Lightning derives it (10000 + the id modulo 1000)."""

    title = "LSF"
    job_id_variable = "LSB_JOBID"
    job_id_port = staticmethod(lsf_port_from_job_id)
    variables_hint = "run the job with jsrun inside an LSF allocation, or export MASTER_ADDR and MASTER_PORT"

    @property
    def main_address(self) -> str:
        if self.config.main_address:  # resolved, with provenance (rules/clusters/lsf.toml)
            return self.config.main_address
        explicit = self.environ.get("MASTER_ADDR", "").strip()
        if explicit:
            return explicit
        rankfile = self.environ.get("LSB_DJOB_RANKFILE", "").strip()
        if not rankfile:
            return self._required("MASTER_ADDR")
        try:
            hosts = [line.strip() for line in Path(rankfile).read_text().splitlines() if line.strip()]
        except OSError as exc:
            raise RuntimeConfigError(f"cannot read the LSF rank file {rankfile}: {exc.strerror}") from exc
        compute_hosts = hosts[1:] or hosts
        if not compute_hosts:
            raise RuntimeConfigError(f"the LSF rank file {rankfile} lists no hosts")
        return compute_hosts[0]
