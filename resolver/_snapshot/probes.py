"""Machine facts, each read by a named probe, for :meth:`resolver.Environment.probe`.

A fact is a named, typed value with a default (``cuda_device_count = 0``); rules read it as the
slot ``env.NAME``. Support for a new accelerator or package registers one more probe::

    @resolver.register_probe("npu_device_count", default=0)
    def npu_device_count(environ):
        return len(glob.glob("/dev/davinci[0-9]*"))

Nothing here imports torch unless the NVIDIA driver is loaded and its device list cannot be read
from ``/proc``; package availability is answered by ``importlib.util.find_spec`` without imports.

What cannot change within a process is read once per process and kept: which packages are
importable, the NVIDIA driver's device count (``CUDA_VISIBLE_DEVICES`` is applied to it on every
probe), and the facts of probes registered with ``per_process=True``. Variables, the host name,
the CPU affinity and whether the interpreter is interactive are read on every probe.
``Environment.probe(refresh=True)`` (or :func:`forget_kept_facts`) reads everything again, e.g.
after installing a package into the running process.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from resolver._engine.integers import parse_int
from resolver._engine.values import fields_repr

__all__ = ["PROBES", "Probe", "forget_kept_facts", "probes", "read_facts", "register_probe"]

# Paths with os.path: probing runs in every process, and pathlib costs a few milliseconds to import.
_NVIDIA_PROC = "/proc/driver/nvidia/gpus"
Reader = Callable[[Mapping[str, str]], Any]


# eq=False: one declaration per probe, compared by identity (as the engine's classes are)
@attrs.frozen(eq=False)
class Probe:
    """How one machine fact is read: ``read(environ)`` returns a value of ``default``'s type."""

    name: str
    default: bool | int | str
    read: Reader
    doc: str = ""
    #: The fact cannot change within a process: read at the first probe and kept.
    per_process: bool = False
    #: The distribution of the plugin that registered it (:mod:`resolver.plugins`); empty: not a plugin's.
    origin: str = ""

    __repr__ = fields_repr

    def check(self, value: Any) -> Any:
        """The value if it has this fact's type, else a ValueError saying what was expected."""
        kind = type(self.default)
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"Environment.{self.name} must be an int >= 0, got {value!r}")
        if kind is bool and not isinstance(value, bool):
            raise ValueError(f"Environment.{self.name} must be true or false, got {value!r}")
        if kind is str and not isinstance(value, str):
            raise ValueError(f"Environment.{self.name} must be text, got {value!r}")
        return value


#: Every registered machine fact, by name (the installed plugins' once :func:`probes` was called).
PROBES: dict[str, Probe] = {}
_plugins_pending = True
#: What this process read once and keeps ("fact:NAME", "module:NAME", "nvidia"): see the module's doc.
_KEPT: dict[str, Any] = {}


def forget_kept_facts() -> None:
    """Forget what was read once per process (packages importable, the driver's devices, facts of
    ``per_process`` probes): the next probe reads them again."""
    _KEPT.clear()


def probes() -> dict[str, Probe]:
    """Every registered probe, the installed plugins' included: their modules are imported at the
    first call (:func:`resolver.plugins.load_plugins`), not when resolver is."""
    global _plugins_pending
    if _plugins_pending:
        from resolver.plugins import load_plugins

        load_plugins()  # another thread waits for it; a plugin module calling back gets the list so far
        _plugins_pending = False
    return PROBES


def read_facts(environ: Mapping[str, str], *, refresh: bool = False) -> dict[str, Any]:
    """Every registered probe's fact, by name; a ``per_process`` probe's as first read (``refresh``: read again)."""
    if refresh:
        forget_kept_facts()
    facts = {}
    for name, probe in probes().items():
        if probe.per_process:
            key = "fact:" + name
            value = _KEPT.get(key, _KEPT)
            if value is _KEPT:
                value = _KEPT[key] = probe.read(environ)
            facts[name] = value
        else:
            facts[name] = probe.read(environ)
    return facts


def register_probe(
    name: str, *, default: bool | int | str, doc: str = "", per_process: bool = False
) -> Callable[[Reader], Reader]:
    """Register ``read(environ) -> value`` as the probe of the machine fact ``name`` (rules read ``env.NAME``).

    ``default`` is the value of a snapshot that does not give the fact, and fixes its type (bool,
    int >= 0, or text). Registering a name again replaces its probe. ``per_process=True``: the
    fact cannot change while the process runs (hardware present, a package installed), so it is
    read at the first probe and kept (``Environment.probe(refresh=True)`` reads it again); it must
    not depend on ``environ``'s variables.
    """
    if not name.isidentifier() or name in ("variables", "files"):
        raise ValueError(f"a machine fact needs an identifier name other than variables/files, got {name!r}")
    if not isinstance(default, bool | int | str):
        raise TypeError(f"the default of fact {name!r} must be a bool, int or str, got {default!r}")

    def decorate(read: Reader) -> Reader:
        from resolver.plugins import importing  # a plugin's module registering its probes while imported

        summary = doc or (read.__doc__ or "").strip().split("\n")[0]
        PROBES[name] = Probe(name, default, read, summary, per_process, importing() or "")
        _KEPT.pop("fact:" + name, None)
        return read

    return decorate


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def module_importable(name: str) -> bool:
    """:func:`module_available`, asked once per process (kept: see the module's doc)."""
    key = "module:" + name
    found = _KEPT.get(key)
    if found is None:
        found = _KEPT[key] = module_available(name)
    return found


def _apply_visible_devices(total: int, environ: Mapping[str, str]) -> int:
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return total
    count = 0
    for entry in visible.split(","):
        entry = entry.strip()
        ordinal = parse_int(entry)
        if not entry or (ordinal is not None and not 0 <= ordinal < total):
            break  # CUDA ignores everything from the first invalid ordinal on
        count += 1
    return min(count, total)


def cuda_device_count(environ: Mapping[str, str]) -> int:
    """Visible CUDA devices: the driver's device list, filtered by ``CUDA_VISIBLE_DEVICES``."""
    total = _KEPT.get("nvidia")
    if total is None:
        total = _KEPT["nvidia"] = _nvidia_devices()
    if total:
        return _apply_visible_devices(total, environ)
    if os.path.exists("/dev/nvidiactl") and module_importable("torch"):
        import torch  # the only way left; happens on containers without /proc/driver/nvidia

        return int(torch.cuda.device_count())  # torch applies CUDA_VISIBLE_DEVICES (and keeps the count)
    return 0


def _nvidia_devices() -> int:
    """How many GPUs the NVIDIA driver lists in ``/proc`` (read once per process: see the module's doc)."""
    if os.path.isdir(_NVIDIA_PROC):
        try:
            return len(os.listdir(_NVIDIA_PROC))
        except OSError:
            pass
    return 0


def mps_available() -> bool:
    import platform

    if sys.platform != "darwin" or platform.machine() != "arm64":
        return False
    return module_importable("torch")


def xla_device_count(environ: Mapping[str, str]) -> int:
    """TPU chips visible through /dev/accel* or /dev/vfio; XLA on CPU when PJRT_DEVICE=CPU."""
    if not module_importable("torch_xla"):
        return 0
    from pathlib import Path

    accel = list(Path("/dev").glob("accel*"))
    if accel:
        return len(accel)
    vfio = [p for p in Path("/dev/vfio").glob("*") if p.name != "vfio"] if Path("/dev/vfio").is_dir() else []
    if vfio:
        return len(vfio)
    if environ.get("PJRT_DEVICE", "").upper() == "CPU":
        return int(environ.get("CPU_NUM_DEVICES", "1") or 1)
    return 0


def is_interactive() -> bool:
    """True inside a notebook or an interactive interpreter (no ``__main__.__file__``)."""
    main = sys.modules.get("__main__")
    if main is None:
        return False
    if hasattr(sys, "ps1"):
        return True
    return not hasattr(main, "__file__") and "ipykernel" in sys.modules


def fork_available() -> bool:
    """Whether the ``fork`` start method exists (every POSIX build; never Windows)."""
    return hasattr(os, "fork")


def cpu_count() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0))
        except OSError:
            pass
    return os.cpu_count() or 0


def hostname() -> str:
    """This machine's name: what ``socket.gethostname()`` says, read without importing socket where
    the OS has ``uname`` (the same system call's answer)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def _register_builtin() -> None:
    facts: list[tuple[str, bool | int | str, Reader, str]] = [
        ("cuda_device_count", 0, lambda environ: cuda_device_count(environ), "visible CUDA devices"),
        ("mps_available", False, lambda environ: mps_available(), "Apple MPS usable"),
        ("xla_device_count", 0, lambda environ: xla_device_count(environ), "XLA devices (TPU chips, or XLA on CPU)"),
        ("torch_xla_available", False, lambda environ: module_importable("torch_xla"), "torch_xla installed"),
        ("horovod_available", False, lambda environ: module_importable("horovod"), "horovod installed"),
        ("deepspeed_available", False, lambda environ: module_importable("deepspeed"), "deepspeed installed"),
        ("mpi4py_available", False, lambda environ: module_importable("mpi4py"), "mpi4py installed"),
        ("interactive", False, lambda environ: is_interactive(), "a notebook or interactive interpreter"),
        ("fork_available", True, lambda environ: fork_available(), "the fork start method exists"),
        ("hostname", "localhost", lambda environ: hostname(), "this machine's host name"),
        ("cpu_count", 0, lambda environ: cpu_count(), "CPU cores this process may use (0: not known)"),
    ]
    for name, default, read, doc in facts:
        register_probe(name, default=default, doc=doc)(read)


_register_builtin()
