"""Hand-made ResolvedConfigs for tests that do not go through the resolver."""

from __future__ import annotations

from typing import Any

from resolver._domain.config import ResolvedConfig


def single_device_config(**overrides: Any) -> ResolvedConfig:
    fields: dict[str, Any] = dict(
        accelerator="cpu",
        num_devices=1,
        device_ids=(0,),
        num_nodes=1,
        strategy="single_device",
        launcher=None,
        collective="single_device",
        process_group_backend=None,
        cluster_environment="local",
        main_address="127.0.0.1",  # as the rules resolve one machine
        precision="32-true",
        world_size=1,
        global_rank=0,
        local_rank=0,
        node_rank=0,
    )
    fields.update(overrides)
    return ResolvedConfig(**fields)


def ddp_config(devices: int = 2, launcher: str | None = "fork", **overrides: Any) -> ResolvedConfig:
    fields: dict[str, Any] = dict(
        accelerator="cpu",
        num_devices=devices,
        device_ids=tuple(range(devices)),
        num_nodes=1,
        strategy="ddp",
        launcher=launcher,
        collective="torch",
        process_group_backend="gloo",
        cluster_environment="local",
        main_address="127.0.0.1",  # as the rules resolve one machine (main_port None: picked at launch)
        precision="32-true",
        world_size=devices,
        global_rank=0,
        local_rank=0,
        node_rank=0,
    )
    fields.update(overrides)
    return ResolvedConfig(**fields)
