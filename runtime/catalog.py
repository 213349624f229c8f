"""The built-in components, by registry and name: ``"module:Class"``, imported on first use.

:mod:`runtime.registry` reads this table; no built-in module registers itself, so importing the
registry imports no component and no component needs the registry (the ``runtime-catalogue``
import contract holds it). A name whose engine is a separate package also gives that package
and how to install it: looking it up without the package raises a
:class:`~runtime.errors.MissingDependencyError`, and the module (which imports the engine) is
imported only where the package is installed.

Plain data (it imports only the install hints, :data:`runtime.errors.INSTALL_HINTS`): users add
their own components with the ``register_*`` functions, and
installed plugins name theirs the same way (``COMPONENTS`` of a ``resolver.plugins`` entry point:
:mod:`resolver.plugins`), added to the registries at their first look-up that misses.
"""

from __future__ import annotations

from runtime.errors import INSTALL_HINTS

__all__ = ["BUILTINS", "Builtin"]

#: ``(target, package, install)``: ``"module:Class"``; the separate package it needs (None: none),
#: and how to install it (:data:`runtime.errors.INSTALL_HINTS`, where each hint is written once).
Builtin = tuple[str, str | None, str | None]


def _needs(package: str, target: str) -> Builtin:
    return (target, package, INSTALL_HINTS[package])


def _xla(target: str) -> Builtin:
    return _needs("torch_xla", target)


def _horovod(target: str) -> Builtin:
    return _needs("horovod", target)


def _plain(target: str) -> Builtin:
    return (target, None, None)


#: Registry kind (``Registry.kind``) -> name -> built-in.
BUILTINS: dict[str, dict[str, Builtin]] = {
    "strategy": {
        "ddp": _plain("runtime.strategies.ddp:DDPStrategy"),
        "deepspeed": _plain("runtime.strategies.deepspeed:DeepSpeedStrategy"),
        "fsdp": _plain("runtime.strategies.fsdp:FSDPStrategy"),
        "horovod": _horovod("runtime.strategies.horovod:HorovodStrategy"),
        "single_device": _plain("runtime.strategies.single_device:SingleDeviceStrategy"),
        "single_xla": _xla("runtime.strategies.xla:SingleXLAStrategy"),
        "xla": _xla("runtime.strategies.xla:XLAStrategy"),
    },
    "accelerator": {
        "cpu": _plain("runtime.accelerators.cpu:CPUAccelerator"),
        "cuda": _plain("runtime.accelerators.cuda:CUDAAccelerator"),
        "mps": _plain("runtime.accelerators.mps:MPSAccelerator"),
        "xla": _xla("runtime.accelerators.xla:XLAAccelerator"),
    },
    "precision": {
        "16-mixed": _plain("runtime.precision.mixed:Float16MixedPrecision"),
        "16-true": _plain("runtime.precision.true_dtype:HalfTruePrecision"),
        "32-true": _plain("runtime.precision.full:FullPrecision"),
        "64-true": _plain("runtime.precision.true_dtype:DoublePrecision"),
        "bf16-mixed": _plain("runtime.precision.mixed:BFloat16MixedPrecision"),
        "bf16-true": _plain("runtime.precision.true_dtype:BFloat16TruePrecision"),
    },
    "collective": {
        "horovod": _horovod("runtime.collectives.horovod:HorovodCollective"),
        "single_device": _plain("runtime.collectives.single_device:SingleDeviceCollective"),
        "torch": _plain("runtime.collectives.torch_distributed:TorchCollective"),
        "xla": _xla("runtime.collectives.xla:XLACollective"),
    },
    "launcher": {
        "fork": _plain("runtime.launchers.multiprocessing:ForkLauncher"),
        "horovod": _horovod("runtime.launchers.horovod:HorovodLauncher"),
        "spawn": _plain("runtime.launchers.multiprocessing:SpawnLauncher"),
        "subprocess": _plain("runtime.launchers.subprocess:SubprocessScriptLauncher"),
        "xla": _xla("runtime.launchers.xla:XLALauncher"),
    },
    "cluster environment": {
        "horovod": _plain("runtime.cluster.horovod:HorovodEnvironment"),
        "kubeflow": _plain("runtime.cluster.kubeflow:KubeflowEnvironment"),
        "local": _plain("runtime.cluster.local:LocalEnvironment"),
        "lsf": _plain("runtime.cluster.lsf:LSFEnvironment"),
        "mpi": _plain("runtime.cluster.mpi:MPIEnvironment"),
        "slurm": _plain("runtime.cluster.slurm:SLURMEnvironment"),
        "torchelastic": _plain("runtime.cluster.torchelastic:TorchElasticEnvironment"),
        "xla": _xla("runtime.cluster.xla:XLAEnvironment"),
    },
}
