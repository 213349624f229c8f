"""``resolver env``: what a bug report needs to know about this machine, as text or JSON.

Versions come from package metadata, so a missing engine costs a metadata lookup, not an import;
torch alone is imported (when installed) because its CUDA, cuDNN and NCCL versions and its device
count are only known to torch itself. Variables whose names look like secrets are masked.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver._domain.config import get_converter
from resolver._engine.errors import ResolutionError, RuleTableError
from resolver._engine.values import display
from resolver._snapshot.environment import Environment
from resolver._snapshot.probes import probes
from resolver.cli.shared import EXIT_OK
from resolver.plugins import DISABLE_VARIABLE, Plugin, load_plugins, plugins_disabled

if TYPE_CHECKING:
    import argparse

    from resolver.cli.options import Parser

__all__ = [
    "DISTRIBUTION",
    "ENV_SCHEMA_VERSION",
    "EnvReport",
    "add_options",
    "collect",
    "mask_variables",
    "resolver_version",
    "run",
]

SUMMARY = "print this machine's versions, devices, cluster and variables, for a bug report"
DESCRIPTION = (
    "Print what a bug report needs: resolver, Python and OS versions; torch (with its CUDA, "
    "cuDNN and NCCL versions), torch_xla, horovod and deepspeed versions or 'not installed'; the "
    "devices and the cluster detected; the relevant environment variables, with secret-like values "
    "(tokens, passwords, keys) masked. Imports torch only when it is installed."
)
EXAMPLES = ("resolver env", "resolver env --format json")


def add_options(env: Parser) -> None:
    """``resolver env``'s one option, ``--format``."""
    env.add_argument("--format", choices=("text", "json"), default="text", help="text to paste (default), or json")


def run(args: argparse.Namespace) -> int:
    """Print this machine's report for a bug report; the exit code."""
    report = collect()
    print(report.to_json() if args.format == "json" else report.to_text())
    return EXIT_OK


#: The name pip installs this project by (``pyproject.toml``); it ships the packages ``resolver`` and
#: ``runtime``. (``resolver`` on the package index is an unrelated project.)
DISTRIBUTION = "training-flag-resolver"

#: Bumped whenever a key of ``resolver env --format json`` changes meaning or disappears.
ENV_SCHEMA_VERSION = 1

#: Engines reported besides torch: (module to look for, distribution that carries its version).
ENGINES: tuple[tuple[str, str], ...] = (("torch_xla", "torch_xla"), ("horovod", "horovod"), ("deepspeed", "deepspeed"))

#: Variables that shape a distributed run without being read by the rules (shown for bug reports).
DEBUG_VARIABLE_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "PYTORCH_", "CUDA_", "XLA_", "PJRT_", "TPU_", "OMP_", "MKL_")

_SECRET_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
)
_SECRET_PARTS = frozenset({"PAT", "PWD", "SIGNATURE", "SESSION", "CERT"})
_URL_PASSWORD = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")
MASK = "<masked>"

NOT_INSTALLED = "not installed"

#: How the text report names the JSON keys.
_LABELS = {
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "nccl": "NCCL",
    "rocm": "ROCm",
    "cuda_available": "CUDA available",
    "cuda_device_count": "CUDA devices",
    "distributed_backends": "distributed backends",
}
#: The machine as the resolver's own probe sees it (no torch needed).
_DEVICE_LABELS = {
    "cpu_count": "CPUs",
    "cuda_device_count": "CUDA devices seen",
    "mps_available": "MPS available",
    "xla_device_count": "XLA devices seen",
    "interactive": "interactive session",
}


@attrs.frozen
class Package:
    """One package: its version (None when not installed) and what else it says about itself."""

    name: str
    version: str | None
    details: Mapping[str, Any] = attrs.field(factory=dict)
    problem: str | None = None

    def describe(self) -> str:
        if self.version is None:
            return NOT_INSTALLED if self.problem is None else f"{NOT_INSTALLED} ({self.problem})"
        text = self.version
        if self.problem is not None:
            text += f" (fails to import: {self.problem})"
        return text


@attrs.frozen
class PluginReport:
    """One installed plugin as ``resolver env`` shows it: who ships it and what it contributes."""

    name: str
    distribution: str
    version: str
    module: str
    rules: tuple[str, ...]
    probes: tuple[str, ...]
    components: Mapping[str, Mapping[str, str]]
    problem: str | None

    @classmethod
    def of(cls, plugin: Plugin, probes: Mapping[str, Any]) -> PluginReport:
        own = tuple(sorted(name for name, probe in probes.items() if probe.origin == plugin.distribution))
        components = {kind: dict(entries) for kind, entries in plugin.components.items()}
        return cls(plugin.name, plugin.distribution, plugin.version, plugin.target, plugin.rules, own, components,
                   plugin.problem)  # fmt: skip

    def describe(self) -> str:
        """``npu-plugin 0.1.0 (npu_plugin): rules ...; probes ...; accelerator npu``, or its problem."""
        head = f"{self.distribution} {self.version} ({self.module})"
        if self.problem is not None:
            return f"{head}: does not load: {self.problem}"
        parts = []
        if self.rules:
            parts.append("rules " + ", ".join(self.rules))
        if self.probes:
            parts.append("probes " + ", ".join(self.probes))
        for kind, entries in sorted(self.components.items()):
            parts.append(f"{kind.replace('_', ' ')} " + ", ".join(sorted(entries)))
        return f"{head}: " + ("; ".join(parts) if parts else "contributes nothing")


@attrs.frozen
class EnvReport:
    """Everything ``resolver env`` prints. :meth:`to_dict` is the JSON shape."""

    resolver_version: str
    python_version: str
    python_implementation: str
    python_executable: str
    platform: str
    packages: tuple[Package, ...]
    devices: Mapping[str, Any]
    cluster_environment: str | None
    cluster_source: str
    variables: Mapping[str, str]
    #: The installed plugins (:mod:`resolver.plugins`), each with what it contributes or its problem.
    plugins: tuple[PluginReport, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        converter = get_converter()
        data: dict[str, Any] = {"schema_version": ENV_SCHEMA_VERSION}
        data.update(converter.unstructure(self))
        data["packages"] = {p.name: converter.unstructure(p) for p in self.packages}
        for package in data["packages"].values():
            del package["name"]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    def to_text(self) -> str:
        """Lines to paste into a bug report (a Markdown list)."""
        rows: list[tuple[int, str, str]] = [
            (0, "resolver", self.resolver_version),
            (0, "Python", f"{self.python_version} ({self.python_implementation}, {self.python_executable})"),
            (0, "OS", self.platform),
        ]
        for package in self.packages:
            rows.append((0, package.name, package.describe()))
            rows += [(1, _LABELS.get(key, key), _shown(value)) for key, value in package.details.items()]
        rows += [(0, _DEVICE_LABELS.get(key, key), _shown(value)) for key, value in self.devices.items()]
        rows.append((0, "cluster detected", f"{self.cluster_environment or 'unknown'} ({self.cluster_source})"))
        plugins = f"{len(self.plugins)}" if self.plugins else "none"
        if plugins_disabled():
            plugins += f" (not looked for: {DISABLE_VARIABLE} is set)"
        rows.append((0, "plugins", plugins))
        rows += [(1, plugin.name, plugin.describe()) for plugin in self.plugins]
        width = max(2 * depth + len(name) for depth, name, _ in rows) + 2
        lines = [f"{'  ' * depth}- {name + ':':<{width - 2 * depth}}{value}" for depth, name, value in rows]
        if self.variables:
            lines.append("- variables:")
            lines += [f"  - {name}={value}" for name, value in self.variables.items()]
        else:
            lines.append("- variables: none of the relevant ones is set")
        return "\n".join(lines)


def _shown(value: Any) -> str:
    """A report cell: a fact reads as an answer (yes/no, a bare list), the rest as :func:`display` writes it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(display(v) for v in value) or "none"
    return display(value, quoted=value is None)


def resolver_version() -> str:
    """The installed distribution's version, or the package's own when run from a source tree."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        from resolver._version import __version__

        return __version__


def is_secret_name(name: str) -> bool:
    """A variable whose value must not be pasted: ``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASSWORD``..."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name.upper()) if p]
    return any(p in _SECRET_PARTS or any(w in p for w in _SECRET_WORDS) for p in parts)


def mask_variables(variables: Mapping[str, str]) -> dict[str, str]:
    """The variables sorted by name, secret-like values replaced, passwords in URLs removed."""
    masked = {}
    for name in sorted(variables):
        value = variables[name]
        if is_secret_name(name) and value:
            masked[name] = MASK
        else:
            masked[name] = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", value)
    return masked


def _module_present(name: str) -> bool:
    from resolver._snapshot.probes import module_available

    return module_available(name)


def _distribution_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _engine(module: str, dist: str) -> Package:
    if not _module_present(module):
        return Package(module, None)
    return Package(module, _distribution_version(dist) or "installed (version unknown)")


def _torch() -> Package:
    if not _module_present("torch"):
        return Package("torch", None)
    try:
        import torch
    except Exception as exc:  # a broken install is exactly what a bug report must show
        return Package("torch", _distribution_version("torch") or "installed", problem=f"{type(exc).__name__}: {exc}")
    details: dict[str, Any] = {
        "cuda": torch.version.cuda,
        "cudnn": _quietly(lambda: torch.backends.cudnn.version()),
        "nccl": _quietly(lambda: ".".join(str(p) for p in torch.cuda.nccl.version())),
    }
    if getattr(torch.version, "hip", None):
        details["rocm"] = torch.version.hip
    details["cuda_available"] = _quietly(torch.cuda.is_available)
    details["cuda_device_count"] = _quietly(torch.cuda.device_count)
    details["distributed_backends"] = _backends(torch)
    return Package("torch", str(torch.__version__), details)


def _backends(torch: Any) -> list[str]:
    dist = torch.distributed
    if not _quietly(dist.is_available):
        return []
    checks = (("gloo", "is_gloo_available"), ("nccl", "is_nccl_available"), ("mpi", "is_mpi_available"))
    return [name for name, check in checks if _quietly(getattr(dist, check, lambda: False))]


def _quietly(read: Any) -> Any:
    """What a torch query answers, or None when this build cannot answer it (CPU builds raise)."""
    try:
        return read()
    except Exception:
        return None


def _cluster(environment: Environment) -> tuple[str | None, str]:
    from resolver._engine.reporter import RecordingReporter
    from resolver.api import resolve

    trace = RecordingReporter()
    try:
        config = resolve(environment=environment, reporter=trace)
    except (ResolutionError, RuleTableError) as error:
        decided = trace.decisions.get("cluster_environment")
        reason = f"resolving with default flags fails here: {error.message}"
        if decided is None:
            return None, reason
        return decided[0], f"{decided[1].describe()}; {reason}"
    detected = trace.decisions.get("cluster.detected")
    if detected is not None and detected[0] == config.cluster_environment:
        # what was seen (SLURM_NTASKS=2, job 'train'), not only that something was
        return config.cluster_environment, detected[1].describe()
    return config.cluster_environment, config.provenance["cluster_environment"].describe()


def report_variables(environment: Environment, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables worth showing: the snapshot's (those the rules read) and the engines' own."""
    shown = dict(environment.variables)
    shown.update((name, value) for name, value in environ.items() if name.startswith(DEBUG_VARIABLE_PREFIXES))
    return shown


def collect(environ: Mapping[str, str] | None = None) -> EnvReport:
    """Read this machine for a bug report (imports torch only if it is installed)."""
    env_vars = dict(os.environ if environ is None else environ)
    try:
        environment = Environment.probe(env_vars)
    except (ResolutionError, RuleTableError):  # a broken plugin: listed below with its problem
        from resolver._domain.rule_tables import load_rules

        environment = Environment.probe(env_vars, table=load_rules(plugins=False))
    cluster, cluster_source = _cluster(environment)
    return EnvReport(
        resolver_version=resolver_version(),
        python_version=platform.python_version(),
        python_implementation=platform.python_implementation(),
        python_executable=sys.executable,
        platform=platform.platform(),
        packages=(_torch(), *(_engine(module, dist) for module, dist in ENGINES)),
        devices={
            "cpu_count": os.cpu_count(),
            "cuda_device_count": environment.cuda_device_count,
            "mps_available": environment.mps_available,
            "xla_device_count": environment.xla_device_count,
            "interactive": environment.interactive,
        },
        cluster_environment=cluster,
        cluster_source=cluster_source,
        variables=mask_variables(report_variables(environment, env_vars)),
        plugins=tuple(PluginReport.of(plugin, probes()) for plugin in load_plugins()),
    )
