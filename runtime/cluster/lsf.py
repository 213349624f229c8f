"""IBM LSF (``jsrun``): the rendezvous the rules resolved from the job's rank file and id."""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment

__all__ = ["LSFEnvironment"]


class LSFEnvironment(ClusterEnvironment):
    """``MASTER_ADDR`` or the first compute host in ``LSB_DJOB_RANKFILE`` (whose first line is the
    launch node, which runs no rank); ``MASTER_PORT`` or a port derived from ``LSB_JOBID`` as PyTorch
    Lightning derives it (10000 + the id modulo 1000). The rules decide both
    (``rules/clusters/lsf.toml``); the runtime reads them from the config."""

    title = "LSF"
    variables_hint = "run the job with jsrun inside an LSF allocation, or export MASTER_ADDR and MASTER_PORT"
