"""Registries: one per component kind, mapping the names a ``ResolvedConfig`` uses to classes.

Adding a strategy (or accelerator, precision, collective, launcher, cluster environment) means
writing a class and registering it under a name; :func:`runtime.build` looks names up here and
never branches on them::

    from runtime import Strategy, register_strategy

    @register_strategy("my_strategy")
    class MyStrategy(Strategy):
        ...

Names the library knows but whose engine is not installed (``xla`` needs torch_xla, ``horovod``
needs horovod, ...) are *declared* as optional: looking them up raises a
:class:`~runtime.errors.MissingDependencyError` that says what to install. An optional name may
also name the module that implements it; that module (which imports the engine) is imported on
the first look-up, and only when the engine's package is installed.

Each registry loads its built-in classes on first use (a look-up, a listing or a registration),
not when ``runtime`` is imported: a process that only starts scripts (``resolver run``) looks up
a cluster environment and never imports the strategies, or torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import attrs

from runtime.errors import MissingDependencyError, RuntimeConfigError

if TYPE_CHECKING:
    from runtime.accelerators.base import Accelerator
    from runtime.cluster.base import ClusterEnvironment
    from runtime.collectives.base import Collective
    from runtime.launchers.base import Launcher
    from runtime.precision.base import Precision
    from runtime.strategies.base import Strategy

__all__ = [
    "ACCELERATORS",
    "CLUSTER_ENVIRONMENTS",
    "COLLECTIVES",
    "LAUNCHERS",
    "PRECISIONS",
    "STRATEGIES",
    "OptionalEngine",
    "Registry",
    "register_accelerator",
    "register_cluster_environment",
    "register_collective",
    "register_launcher",
    "register_precision",
    "register_strategy",
]

T = TypeVar("T")
C = TypeVar("C", bound=type)


@attrs.frozen
class OptionalEngine:
    """A name the library knows whose implementation lives in a package that may be absent."""

    package: str
    install: str
    #: The module that registers the implementation when imported (``None``: not implemented).
    implementation: str | None = None


#: Declares the names whose engine is a separate package, in every registry.
_OPTIONAL_ENGINES = "runtime.optional_engines"
_LOADING = threading.RLock()


class Registry(Generic[T]):
    """Names -> classes for one component kind (``kind`` is used in error messages).

    ``builtins`` are the modules that register the library's own classes of this kind; they are
    imported on the registry's first use, before anything else is registered or looked up.
    """

    def __init__(self, kind: str, builtins: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}
        self._optional: dict[str, OptionalEngine] = {}
        self._builtins = builtins
        self._loaded = not builtins
        self._loading = False

    def _load_builtins(self) -> None:
        if self._loaded:
            return
        with _LOADING:  # another thread waits until the built-ins are all registered
            if self._loaded or self._loading:
                return  # loaded meanwhile, or a built-in module registering itself while it loads
            self._loading = True
            try:
                for module in (*self._builtins, _OPTIONAL_ENGINES):
                    importlib.import_module(module)
                self._loaded = True
            finally:
                self._loading = False

    @overload
    def register(self, name: str, cls: None = None, *, replace: bool = False) -> Callable[[C], C]: ...

    @overload
    def register(self, name: str, cls: C, *, replace: bool = False) -> C: ...

    def register(self, name: str, cls: Any = None, *, replace: bool = False) -> Any:
        """Register ``cls`` under ``name``; without ``cls``, return a class decorator.

        Registering a name twice is an error unless ``replace=True`` (so two plugins cannot
        silently shadow each other).
        """
        self._load_builtins()

        def decorate(klass: C) -> C:
            if not isinstance(klass, type):
                raise TypeError(f"register a class as {self.kind} {name!r}, got {klass!r}")
            if name in self._classes and not replace and self._classes[name] is not klass:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered to {self._classes[name].__qualname__}; "
                    "pass replace=True to override it"
                )
            self._classes[name] = klass
            self._optional.pop(name, None)
            return klass

        return decorate if cls is None else decorate(cls)

    def declare_optional(self, name: str, *, package: str, install: str, implementation: str | None = None) -> None:
        """Make ``name`` known, implemented by a package that is not part of this runtime.

        ``implementation`` is the module that registers ``name`` when imported; it is imported
        on the first :meth:`get` where ``package`` is installed, never before.
        """
        if name not in self._classes:
            self._optional[name] = OptionalEngine(package=package, install=install, implementation=implementation)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (mainly for tests that register temporary classes)."""
        self._load_builtins()
        self._classes.pop(name, None)

    def get(self, name: str) -> type[T]:
        """The class registered under ``name``, or a clear error saying what is missing."""
        self._load_builtins()
        if name in self._classes:
            return self._classes[name]
        engine = self._optional.get(name)
        if engine is not None:
            if importlib.util.find_spec(engine.package) is None:
                raise MissingDependencyError(f"{self.kind} {name!r}", engine.package, engine.install)
            if engine.implementation is not None:
                importlib.import_module(engine.implementation)
                if name in self._classes:
                    return self._classes[name]
            raise RuntimeConfigError(
                f"{self.kind} {name!r}: {engine.package} is installed, but this runtime does not "
                f"implement the {name!r} {self.kind} yet\n"
                f"  hint: register an implementation with runtime.register_{self.kind.replace(' ', '_')}"
                f"({name!r}, replace=True)"
            )
        known = ", ".join(repr(n) for n in self.names())
        raise RuntimeConfigError(
            f"unknown {self.kind} {name!r}; registered {self.kind}s are {known}\n"
            f"  hint: register your class with runtime.register_{self.kind.replace(' ', '_')}({name!r})"
        )

    def names(self) -> tuple[str, ...]:
        """Every known name, implemented or optional, sorted."""
        self._load_builtins()
        return tuple(sorted({*self._classes, *self._optional}))

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        self._load_builtins()
        return iter(sorted(self._classes))


STRATEGIES: Registry[Strategy] = Registry("strategy", ("runtime.strategies",))
ACCELERATORS: Registry[Accelerator] = Registry("accelerator", ("runtime.accelerators",))
PRECISIONS: Registry[Precision] = Registry("precision", ("runtime.precision",))
COLLECTIVES: Registry[Collective] = Registry("collective", ("runtime.collectives",))
LAUNCHERS: Registry[Launcher] = Registry(
    "launcher",
    ("runtime.launchers.multiprocessing", "runtime.launchers.subprocess_script", "runtime.launchers.horovod"),
)
CLUSTER_ENVIRONMENTS: Registry[ClusterEnvironment] = Registry("cluster environment", ("runtime.cluster",))


def register_strategy(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register a :class:`~runtime.strategies.base.Strategy` subclass (decorator or call)."""
    return STRATEGIES.register(name, cls, replace=replace)


def register_accelerator(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register an :class:`~runtime.accelerators.base.Accelerator` subclass."""
    return ACCELERATORS.register(name, cls, replace=replace)


def register_precision(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register a :class:`~runtime.precision.base.Precision` subclass."""
    return PRECISIONS.register(name, cls, replace=replace)


def register_collective(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register a :class:`~runtime.collectives.base.Collective` subclass."""
    return COLLECTIVES.register(name, cls, replace=replace)


def register_launcher(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register a :class:`~runtime.launchers.base.Launcher` subclass."""
    return LAUNCHERS.register(name, cls, replace=replace)


def register_cluster_environment(name: str, cls: Any = None, *, replace: bool = False) -> Any:
    """Register a :class:`~runtime.cluster.base.ClusterEnvironment` subclass."""
    return CLUSTER_ENVIRONMENTS.register(name, cls, replace=replace)
