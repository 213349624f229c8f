"""A plain torch.distributed script, as written for torchrun: it joins with ``env://``, all-reduces,
resolves as a script would, and prints one ``TORCH-RANK {json}`` line per rank."""

import json
import os

import torch
import torch.distributed as dist

import resolver

NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(total)
config = resolver.resolve(devices=int(os.environ["LOCAL_WORLD_SIZE"]))
found = {name: os.environ.get(name) for name in NAMES}
found.update(
    run_id_set=bool(os.environ.get("TORCHELASTIC_RUN_ID")),
    elastic_launched=dist.is_torchelastic_launched(),
    rank=dist.get_rank(),
    world=dist.get_world_size(),
    sum=int(total.item()),
    resolved=[config.cluster_environment, config.launcher, config.global_rank, config.local_rank, config.world_size],
)
print("TORCH-RANK " + json.dumps(found, sort_keys=True) + "\n", end="", flush=True)
dist.destroy_process_group()
