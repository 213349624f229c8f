"""Names the resolver may choose whose engine this runtime does not ship.

Building a config that names one raises a :class:`~runtime.errors.MissingDependencyError`
saying which package to install, or, where the package is installed, that this runtime has no
implementation yet (register one with the matching ``register_*`` function).
"""

from __future__ import annotations

from runtime.registry import ACCELERATORS, CLUSTER_ENVIRONMENTS, COLLECTIVES, LAUNCHERS, STRATEGIES

__all__: list[str] = []

_XLA = {"package": "torch_xla", "install": "pip install torch_xla  (on CPU, run with PJRT_DEVICE=CPU)"}
_HOROVOD = {"package": "horovod", "install": "HOROVOD_WITH_PYTORCH=1 pip install horovod[pytorch]"}

for _name in ("xla", "single_xla"):
    STRATEGIES.declare_optional(_name, **_XLA)
STRATEGIES.declare_optional("horovod", **_HOROVOD)
ACCELERATORS.declare_optional("xla", **_XLA)
COLLECTIVES.declare_optional("xla", **_XLA)
COLLECTIVES.declare_optional("horovod", **_HOROVOD)
LAUNCHERS.declare_optional("xla", **_XLA)
LAUNCHERS.declare_optional("horovod", **_HOROVOD)
CLUSTER_ENVIRONMENTS.declare_optional("xla", **_XLA)
