"""horovodrun (Gloo): it started every process and exported Horovod's rendezvous.

Ranks and sizes come from ``HOROVOD_RANK``/``HOROVOD_SIZE``/``HOROVOD_LOCAL_RANK``/
``HOROVOD_CROSS_RANK`` (read by the rules into the resolved config); the rendezvous Horovod's
processes meet at is ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``HOROVOD_GLOO_RENDEZVOUS_PORT``, which
Horovod itself reads when the collective is set up.
"""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment

__all__ = ["HorovodEnvironment"]


class HorovodEnvironment(ClusterEnvironment):
    """The rendezvous of a ``horovodrun --gloo`` job: Horovod's own Gloo rendezvous server."""

    title = "a horovodrun job"
    variables_hint = "start the script with `horovodrun -np <processes> --gloo python script.py`, which exports them"
