"""A snapshot of the machine and cluster: the only input to resolution that is not a flag.

Rules never read ``os.environ`` or probe hardware; they read an :class:`Environment`. Tests,
golden files and ``resolver explain --simulate`` build one directly; ``Environment.probe()``
reads the real machine.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from resolver.config import FrozenMapping
from resolver.errors import ResolutionError

__all__ = ["Environment", "RELEVANT_VARIABLE_PREFIXES", "RELEVANT_VARIABLES"]

#: Variables a snapshot keeps (exact names), besides those starting with a relevant prefix.
RELEVANT_VARIABLES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "ROLE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "CUDA_VISIBLE_DEVICES",
        "PMI_SIZE",
        "PMI_RANK",
        "PJRT_DEVICE",
        "TPU_NUM_DEVICES",
    }
)
RELEVANT_VARIABLE_PREFIXES = ("SLURM_", "LSB_", "JSM_", "OMPI_", "KUBERNETES_", "RESOLVER_", "HOROVOD_", "XRT_")


def _frozen_str_mapping(value: Mapping[str, Any] | None) -> FrozenMapping:
    return FrozenMapping({str(k): str(v) for k, v in (value or {}).items()})


def _non_negative(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ResolutionError(f"Environment.{attribute.name} must be an int >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Environment:
    """What resolution may know about the machine and the cluster.

    ``variables`` holds the relevant environment variables (SLURM_*, torchrun's RANK/WORLD_SIZE,
    LSF's LSB_*/JSM_*, OpenMPI's OMPI_*, KUBERNETES_*, CUDA_VISIBLE_DEVICES, RESOLVER_*).
    """

    cuda_device_count: int = attrs.field(default=0, validator=_non_negative)
    mps_available: bool = False
    xla_device_count: int = attrs.field(default=0, validator=_non_negative)
    torch_xla_available: bool = False
    horovod_available: bool = False
    deepspeed_available: bool = False
    interactive: bool = False
    fork_available: bool = True
    hostname: str = "localhost"
    variables: FrozenMapping = attrs.field(factory=FrozenMapping, converter=_frozen_str_mapping)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "environment") -> Environment:
        """Build from plain data (the TOML environment file's shape); unknown keys are errors."""
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ResolutionError(
                f"{source}: unknown environment field(s) {', '.join(unknown)}; "
                f"known fields are {', '.join(sorted(known))}"
            )
        try:
            return cls(**dict(data))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ResolutionError(f"{source}: {exc}") from exc

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> Environment:
        """Load a snapshot from a TOML file whose keys are this class's field names.

        A top-level ``[environment]`` table is accepted too, so a golden scenario file can be
        used as an environment file.
        """
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except OSError as exc:
            raise ResolutionError(f"cannot read environment file {p}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ResolutionError(f"{p}: not UTF-8 text ({exc.reason}); save it as UTF-8") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ResolutionError(f"{p}: malformed TOML: {exc}") from exc
        if "environment" in data and isinstance(data["environment"], dict):
            data = data["environment"]
        return cls.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["variables"] = dict(self.variables)
        return data

    def with_variables(self, **variables: str) -> Environment:
        """A copy with extra (or replaced) variables."""
        merged = dict(self.variables)
        merged.update(variables)
        return attrs.evolve(self, variables=merged)

    # -- probing the real machine ---------------------------------------------------------------

    @classmethod
    def probe(cls, environ: Mapping[str, str] | None = None) -> Environment:
        """Read the real machine, cheaply.

        GPUs are counted from the NVIDIA driver's files (respecting ``CUDA_VISIBLE_DEVICES``);
        torch is imported only when the driver is present but cannot be read any other way.
        Package availability is checked with ``importlib.util.find_spec`` (no import).
        """
        from resolver import probing

        env = dict(os.environ if environ is None else environ)
        return cls(
            cuda_device_count=probing.cuda_device_count(env),
            mps_available=probing.mps_available(),
            xla_device_count=probing.xla_device_count(env),
            torch_xla_available=probing.module_available("torch_xla"),
            horovod_available=probing.module_available("horovod"),
            deepspeed_available=probing.module_available("deepspeed"),
            interactive=probing.is_interactive(),
            fork_available=probing.fork_available(),
            hostname=socket.gethostname(),
            variables={k: v for k, v in env.items() if is_relevant_variable(k)},
        )


def is_relevant_variable(name: str) -> bool:
    return name in RELEVANT_VARIABLES or name.startswith(RELEVANT_VARIABLE_PREFIXES)
