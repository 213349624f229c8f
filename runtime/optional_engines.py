"""Names the resolver may choose whose engine this runtime does not ship.

Building a config that names one raises a :class:`~runtime.errors.MissingDependencyError`
saying which package to install. Where the package is installed, the module named as the
implementation is imported then (so torch_xla is imported only by runs that use XLA); a name
without one says this runtime has no implementation yet (register one with the matching
``register_*`` function).
"""

from __future__ import annotations

from runtime.registry import ACCELERATORS, CLUSTER_ENVIRONMENTS, COLLECTIVES, LAUNCHERS, STRATEGIES

__all__: list[str] = []

_XLA = {
    "package": "torch_xla",
    "install": "pip install torch_xla at your torch's version (torch_xla X.Y.Z needs torch X.Y.Z exactly, e.g. "
    "pip install torch==2.9.0 torch_xla==2.9.0); without a TPU, run on CPU with PJRT_DEVICE=CPU",
}
_HOROVOD = {"package": "horovod", "install": "HOROVOD_WITH_PYTORCH=1 pip install horovod[pytorch]"}

for _name in ("xla", "single_xla"):
    STRATEGIES.declare_optional(_name, **_XLA, implementation="runtime.strategies.xla")
STRATEGIES.declare_optional("horovod", **_HOROVOD)
ACCELERATORS.declare_optional("xla", **_XLA, implementation="runtime.accelerators.xla")
COLLECTIVES.declare_optional("xla", **_XLA, implementation="runtime.collectives.xla")
COLLECTIVES.declare_optional("horovod", **_HOROVOD)
LAUNCHERS.declare_optional("xla", **_XLA, implementation="runtime.launchers.xla")
LAUNCHERS.declare_optional("horovod", **_HOROVOD)
CLUSTER_ENVIRONMENTS.declare_optional("xla", **_XLA, implementation="runtime.cluster.xla")
