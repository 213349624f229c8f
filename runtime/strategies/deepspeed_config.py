"""The DeepSpeed config a ``deepspeed`` strategy runs with: made from its options, extendable, replaceable.

Generated from the options (``stage``, ``offload_optimizer``, ``offload_parameters``,
``remote_device``, ``nvme_path``) and the precision; ``extra_config`` (a dict or a JSON file) is
merged into it key by key, nested tables included; ``deepspeed_config`` (a dict or a JSON file) replaces it.

Gradients are not clipped unless a config asks (``gradient_clipping``): DeepSpeed's own default
clips their norm to 1.0, which would make the same script train differently under ``deepspeed``
than under ``ddp`` or ``fsdp``; PyTorch Lightning's Trainer also sets 0.0 where the config says nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.errors import RuntimeConfigError

__all__ = ["deepspeed_config", "merged", "read_config"]

DEFAULT_STAGE = 2


def read_config(name: str, value: Mapping[str, Any] | str) -> dict[str, Any]:
    """A config given as a mapping, or as the path of a JSON file."""
    if isinstance(value, Mapping):
        return json.loads(json.dumps(value))  # a deep, plain copy (and proof that it is JSON data)
    path = Path(value)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise RuntimeConfigError(
            f"strategy option {name}={value!r}: cannot read the DeepSpeed config file ({exc.strerror})",
            hint="pass a dict or the path of a JSON file",
        ) from None
    except json.JSONDecodeError as exc:
        raise RuntimeConfigError(f"strategy option {name}={value!r}: the file is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RuntimeConfigError(
            f"strategy option {name}={value!r}: the file holds {type(data).__name__}, not an object"
        )
    return data


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s keys put in, merging nested mappings instead of replacing them."""
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def deepspeed_config(options: Any, precision_section: Mapping[str, Any], *, pin_memory: bool) -> dict[str, Any]:
    """The config for a strategy's options (see :class:`~runtime.strategies.deepspeed.DeepSpeedOptions`);
    ``pin_memory`` is the accelerator's (whether offloaded host memory is pinned)."""
    if options.deepspeed_config is not None:
        chosen = [name for name in ("stage", "offload_optimizer", "offload_parameters", "remote_device")
                  if getattr(options, name) not in (None, False)]  # fmt: skip
        if chosen:
            raise RuntimeConfigError(
                f"the deepspeed strategy got a whole config (strategy option 'deepspeed_config') and also "
                f"{', '.join(f'{n}={getattr(options, n)!r}' for n in chosen)}, which that config replaces",
                hint="put them in the config's zero_optimization section, or pass extra_config (merged into "
                "the generated config) instead of deepspeed_config",
            )
        replacement = read_config("deepspeed_config", options.deepspeed_config)
        replacement.setdefault("train_micro_batch_size_per_gpu", 1)
        replacement.setdefault("gradient_clipping", 0.0)
        return replacement
    stage = DEFAULT_STAGE if options.stage is None else options.stage
    zero: dict[str, Any] = {"stage": stage}
    device = options.remote_device or "cpu"
    offload = {"device": device, "pin_memory": pin_memory}
    if device == "nvme":
        offload["nvme_path"] = options.nvme_path
    if options.offload_optimizer:
        zero["offload_optimizer"] = dict(offload)
    if options.offload_parameters:
        if stage != 3:
            raise RuntimeConfigError(
                f"offload_parameters needs ZeRO stage 3 (parameters are only partitioned there), but stage is {stage}",
                hint="pass stage=3 (strategy='deepspeed_stage_3_offload'), or offload_optimizer only",
            )
        zero["offload_param"] = dict(offload)
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0,  # none unless asked for (DeepSpeed's default is 1.0)
        "zero_optimization": zero,
        # torch's own optimizers (SGD, Adam, ...) work with ZeRO; DeepSpeed asks to confirm that
        "zero_allow_untested_optimizer": True,
        **precision_section,
    }
    if options.offload_optimizer:
        config["zero_force_ds_cpu_optimizer"] = False  # keep the user's optimizer instead of DeepSpeedCPUAdam
    if options.extra_config is not None:
        config = merged(config, read_config("extra_config", options.extra_config))
    return config
