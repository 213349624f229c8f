"""One process on one device."""

from __future__ import annotations

from typing import Any

from runtime.collectives.rendezvous import Rendezvous
from runtime.errors import RuntimeConfigError
from runtime.strategies.base import Strategy

__all__ = ["SingleDeviceStrategy"]


class SingleDeviceStrategy(Strategy):
    """No processes to coordinate: the collective is the identity and modules are not wrapped.

    Nothing to join, so its methods also work without ``launch`` (as in a notebook).
    """

    usable_unset = True

    def __init__(self, config: Any, **kwargs: Any) -> None:
        if config.world_size != 1:
            raise RuntimeConfigError(
                f"the single_device strategy runs one process, but the config has world_size "
                f"{config.world_size}; a multi-process run needs strategy 'ddp' (or another distributed one)"
            )
        super().__init__(config, **kwargs)

    def setup_environment(self, store: Any = None) -> None:  # one process: no store to meet in
        device = self.root_device
        self.accelerator.set_device(device)
        self.collective.setup(Rendezvous(rank=0, world_size=1, device=device))
