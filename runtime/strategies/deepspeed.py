"""DeepSpeed ZeRO (stages 1-3, CPU/NVMe offload) on an engine that wraps the module and optimizer.

DeepSpeed is an optional extra (``pip install 'training-flag-resolver[deepspeed]'``); this module imports it
only when a strategy is set up. On CUDA it communicates with nccl, on the CPU with gloo (over
the process group the collective made).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import torch

from runtime.checkpoint import check_directory, entries_before_save, mark_complete, mark_incomplete
from runtime.errors import MissingDependencyError, RuntimeConfigError, StrategyMisuseError
from runtime.precision.sharded import EnginePrecision, deepspeed_precision_config
from runtime.strategies.base import SETUP_CALL, Strategy
from runtime.strategies.deepspeed_config import deepspeed_config
from runtime.strategies.options import StrategyOptions

__all__ = ["INSTALL", "DeepSpeedOptions", "DeepSpeedStrategy"]

#: How to get DeepSpeed for this project.
INSTALL = "pip install 'training-flag-resolver[deepspeed]'  (or: pip install deepspeed)"


def _config_source(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str | Mapping):
        raise TypeError(f"{attribute.name} takes a dict or the path of a JSON file, got {value!r}")


@attrs.frozen(kw_only=True)
class DeepSpeedOptions(StrategyOptions):
    """The ZeRO setup; the ``deepspeed_stage_*`` strategy names set these.

    - ``stage`` (0-3, default 2): what is partitioned: 1 optimizer state, 2 also gradients,
      3 also parameters.
    - ``offload_optimizer`` / ``offload_parameters`` (stage 3): keep them in CPU memory (or on
      NVMe with ``remote_device="nvme"`` and ``nvme_path``).
    - ``extra_config``: a dict or JSON file merged into the generated DeepSpeed config.
    - ``deepspeed_config``: a dict or JSON file used *instead of* the generated config.
    - ``logging_level``: DeepSpeed's logger level (default ``WARNING``).
    """

    stage: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.in_(range(4))))
    offload_optimizer: bool = False
    offload_parameters: bool = False
    remote_device: Literal["cpu", "nvme"] | None = None
    nvme_path: str = "/local_nvme"
    extra_config: Any = attrs.field(default=None, validator=_config_source)
    deepspeed_config: Any = attrs.field(default=None, validator=_config_source)
    logging_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"


def _deepspeed_has_cpu_support() -> bool:
    """Whether the installed DeepSpeed ships its CPU accelerator (looked up without importing it)."""
    spec = importlib.util.find_spec("deepspeed")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(location) / "accelerator" / "cpu_accelerator.py").is_file() for location in locations)


class DeepSpeedStrategy(Strategy):
    """Trains through a ``deepspeed.DeepSpeedEngine``.

    Set up with :meth:`setup_module_and_optimizer` (DeepSpeed wraps both); then
    :meth:`backward` and :meth:`optimizer_step` call the engine's ``backward`` and ``step``
    (which also zeroes the gradients). :attr:`deepspeed_config` is the config in use.
    """

    Options = DeepSpeedOptions
    optimizer_from_setup = (
        "DeepSpeed steps through the optimizer it wrapped in its engine (partitioned by ZeRO); another optimizer "
        "would not be stepped by the engine"
    )

    def __init__(self, config: Any, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        if importlib.util.find_spec("deepspeed") is None:
            raise MissingDependencyError("strategy 'deepspeed'", "deepspeed", INSTALL)
        if self.accelerator.computes_on_cpu and not _deepspeed_has_cpu_support():
            raise RuntimeConfigError(
                f"the installed DeepSpeed cannot run on {config.accelerator} (it has no CPU accelerator)",
                hint="pip install -U deepspeed (0.10 or newer runs on the CPU with gloo), or run on CUDA",
            )
        self.deepspeed_config: dict[str, Any] = deepspeed_config(
            self.options, deepspeed_precision_config(self.precision), pin_memory=self.accelerator.pin_memory
        )
        self._precision = EnginePrecision(self.precision, cast_inputs=True, convert_module=False)
        self._engine: Any = None
        self._engines: list[Any] = []

    # -- set-up ----------------------------------------------------------------------------------

    def setup_environment(self, store: Any = None) -> None:
        if self.root_device.type == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read by DeepSpeed when it is first imported
        super().setup_environment(store)
        deepspeed = self._import()
        accelerator = deepspeed.accelerator.get_accelerator()
        if accelerator.device_name() != self.root_device.type:
            raise RuntimeConfigError(
                f"DeepSpeed chose the {accelerator.device_name()!r} accelerator, but this run computes on "
                f"{self.root_device.type!r}",
                hint=f"set DS_ACCELERATOR={self.root_device.type} before DeepSpeed is first imported",
            )
        self._check_precision(accelerator)
        deepspeed.init_distributed(dist_backend=self.config.process_group_backend, dist_init_required=False)

    def teardown(self) -> None:
        """Leave the run (:meth:`Strategy.teardown`) and drop its engines: the next run sets up its own."""
        self._engine = None
        self._engines = []
        super().teardown()

    def _import(self) -> Any:
        import deepspeed

        logging.getLogger("DeepSpeed").setLevel(self.options.logging_level)
        return deepspeed

    def _check_precision(self, accelerator: Any) -> None:
        for section, supported in (("fp16", accelerator.is_fp16_supported), ("bf16", accelerator.is_bf16_supported)):
            if self.deepspeed_config.get(section, {}).get("enabled") and not supported():
                raise RuntimeConfigError(
                    f"precision={self.config.precision!r}: DeepSpeed on {accelerator.device_name()} has no "
                    f"{section} support",
                    hint="use precision='bf16-mixed' or '32-true' here",
                )

    def setup_module_and_optimizer(
        self,
        module: torch.nn.Module,
        make_optimizer: Callable[[Iterator[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        module = self.precision.convert_module(module).to(self.root_device)
        engine, optimizer, _, _ = self._import().initialize(
            model=module, optimizer=make_optimizer(module.parameters()), config=self.deepspeed_config,
            dist_init_required=False,
        )  # fmt: skip
        self._adopt(engine)
        return engine, optimizer

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Not for DeepSpeed: its engine takes the module and the optimizer together; see
        :meth:`setup_module_and_optimizer`."""
        raise self._needs_optimizer("setup_module")

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Not for DeepSpeed (see :meth:`setup_module`)."""
        raise self._needs_optimizer("wrap_module")

    def _needs_optimizer(self, method: str) -> StrategyMisuseError:
        # Without an optimizer, deepspeed.initialize fails for ZeRO stages 1 and 2 ("zero stage 2 requires an
        # optimizer") and stage 3 gives an engine whose first backward fails inside DeepSpeed.
        return StrategyMisuseError(
            method,
            f"DeepSpeed (ZeRO stage {self.deepspeed_config.get('zero_optimization', {}).get('stage', 0)}) wraps the "
            "module and its optimizer in one engine, so it needs the optimizer when the module is set up; an "
            "optimizer made afterwards would never be stepped by the engine",
            f"{SETUP_CALL}; then strategy.backward(loss) and strategy.optimizer_step(optimizer)",
        )

    def _adopt(self, engine: Any) -> None:
        """Make ``engine`` the one :meth:`backward` uses, and again whenever it runs a forward pass
        (so several engines in one process each back-propagate their own loss)."""
        self._engine = engine
        self._engines.append(engine)
        engine.register_forward_pre_hook(lambda module, args: setattr(self, "_engine", module))

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return getattr(module, "module", module) if self._is_engine(module) else module

    @staticmethod
    def _is_engine(module: object) -> bool:
        engine_class = _engine_class()
        return engine_class is not None and isinstance(module, engine_class)

    # -- training --------------------------------------------------------------------------------

    @property
    def engine(self) -> Any:
        """The ``DeepSpeedEngine`` that ran the last forward pass (or was set up last)."""
        if self._engine is None:
            raise StrategyMisuseError(
                "engine",
                "the deepspeed strategy has no engine yet",
                "call model, optimizer = strategy.setup_module_and_optimizer(model, make_optimizer) first",
            )
        return self._engine

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """The engine's backward (it scales the loss for fp16 and reduces gradients across ranks)."""
        self.engine.backward(loss, **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        """The engine's step: update the (partitioned) parameters, then zero the gradients."""
        owners = [engine for engine in self._engines if engine.optimizer is optimizer]
        return (owners[0] if owners else self.engine).step(**kwargs)

    # -- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
        """Every rank writes its partition to the directory ``path`` (DeepSpeed's layout); entries of
        ``state`` other than the engine and its optimizer are saved with it."""
        from runtime.strategies.checkpoint_saving import settle_save
        from runtime.strategies.deepspeed_checkpoint import safe_checkpoint_engine

        engine = self._engine_in(state)
        extras = {k: v for k, v in state.items() if v is not engine and v is not engine.optimizer}
        before = entries_before_save(path) if self.is_global_zero else None
        if self.is_global_zero and Path(path).is_dir():
            mark_incomplete(path)  # before any rank writes into it (the barrier)
        self.collective.barrier()
        tag = f"global_step{engine.global_steps}"  # DeepSpeed's own default tag
        failure: BaseException | None = None
        # The engine's writes go through a checkpoint engine that notes a failure (a full disk) instead of
        # raising it on one rank, which would leave the others in DeepSpeed's closing barrier.
        with safe_checkpoint_engine(engine, Path(path), weights_only=self.checkpoint_io.weights_only) as swapped:
            try:
                engine.save_checkpoint(os.fspath(path), tag=tag, client_state={"entries": extras}, save_latest=False)
            except Exception as exc:  # noqa: BLE001 (told to every rank by settle_save, then raised)
                failure = exc
            failure = failure or swapped.failure
        if failure is None and self.is_global_zero:
            try:
                (Path(path) / "latest").write_text(tag)  # what DeepSpeed's load reads, written once all is
            except OSError as exc:
                failure = exc
        settle_save(self, path, failure, before)  # every rank raises alike if any failed
        self.collective.barrier()
        if self.is_global_zero:
            mark_complete(path)  # every rank's partition is written (latest_checkpoint looks for it)
        self.collective.barrier()

    def load_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Load the engine's module and optimizer state from ``path`` and return the other entries (every file
        read with ``weights_only=True`` unless :attr:`checkpoint_io` trusts pickles)."""
        engine = self._engine_in(state or {})
        if not Path(path).is_dir():
            raise FileNotFoundError(f"no DeepSpeed checkpoint directory at {path}")
        from runtime.strategies.deepspeed_checkpoint import check_world_size, safe_checkpoint_engine

        check_directory(path)  # every file as the .complete mark lists it
        check_world_size(Path(path), self.world_size)  # before DeepSpeed's own load fails without saying why

        # as safely as the strategy's checkpoint_io loads a file (weights_only unless the user opted out)
        with safe_checkpoint_engine(engine, Path(path), weights_only=self.checkpoint_io.weights_only):
            loaded_path, client_state = engine.load_checkpoint(os.fspath(path))
        if loaded_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint in {path} (it has no 'latest' tag file)")
        return dict((client_state or {}).get("entries", {}))

    def _engine_in(self, state: Mapping[str, Any]) -> Any:
        engines = [value for value in state.values() if self._is_engine(value)]
        if len(engines) != 1:
            raise ValueError(
                f"a DeepSpeed checkpoint is saved and loaded through its engine: the state must hold the module "
                f"setup_module_and_optimizer returned, once (found {len(engines)} engines)"
            )
        return engines[0]

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, Any]:
        """The complete parameters on every rank (ZeRO-3 gathers its partitions)."""
        inner = self.unwrap_module(module)
        if not self._is_engine(module) or not module.zero_optimization_partition_weights():  # type: ignore[operator]
            return {k: v.detach().clone() for k, v in inner.state_dict().items()}
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(inner.parameters()), modifier_rank=None):
            return {name: p.detach().clone() for name, p in inner.named_parameters()}


def _engine_class() -> type | None:
    import sys

    engine_module = sys.modules.get("deepspeed.runtime.engine")
    return getattr(engine_module, "DeepSpeedEngine", None)
