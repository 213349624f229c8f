"""Registries: one per component kind, mapping the names a ``ResolvedConfig`` uses to classes.

Adding a strategy (or accelerator, precision, collective, launcher, cluster environment) means
writing a class and registering it under a name; :func:`runtime.build` looks names up here and
never branches on them::

    from runtime import Strategy, register_strategy

    @register_strategy("my_strategy")
    class MyStrategy(Strategy):
        ...

The library's own classes are named in :mod:`runtime.catalog` (``"module:Class"``) and imported
on their first look-up, not when ``runtime`` is imported: a process that only starts scripts
(``resolver run``) looks up a cluster environment and never imports the strategies, or torch.
A built-in whose engine is a separate package (``xla`` needs torch_xla) is looked up only where
that package is installed; without it the look-up raises a
:class:`~runtime.errors.MissingDependencyError` that says what to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from runtime.catalog import BUILTINS, Builtin
from runtime.errors import MissingDependencyError, RuntimeConfigError

if TYPE_CHECKING:
    from resolver.plugins import Plugin
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


_LOADING = threading.RLock()


def _path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class Registry(Generic[T]):
    """Names -> classes for one component kind (``kind`` is used in error messages).

    ``builtins`` names the library's own classes (:data:`runtime.catalog.BUILTINS`): each is
    imported on its first look-up. A user's registration of a built-in name replaces it.
    """

    def __init__(self, kind: str, builtins: Mapping[str, Builtin] | None = None) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}
        #: The catalogue entries not imported (nor replaced, nor unregistered) yet.
        self._builtins: dict[str, Builtin] = dict(builtins or {})
        self._catalogue: dict[str, str] = {name: entry[0] for name, entry in self._builtins.items()}
        #: The entries the installed plugins added (name -> the plugin, for messages).
        self._from_plugins: dict[str, str] = {}
        self._plugins_added = False

    def _add_plugins(self) -> None:
        """Add the installed plugins' entries of this kind (:mod:`resolver.plugins`), once: at the
        first look-up that misses or listing, not when the registry is imported."""
        if self._plugins_added:
            return
        with _LOADING:
            if self._plugins_added:
                return
            self._plugins_added = True
            for plugin, name, target in plugin_components(self.kind):
                if name in self._classes:
                    continue  # a class the user registered under the name keeps it
                if name in self._builtins or name in self._catalogue:
                    raise RuntimeConfigError(
                        f"{plugin.title} names a {self.kind} {name!r}, which is built in "
                        f"({self._catalogue.get(name) or self._builtins[name][0]})",
                        hint=f"the plugin must use a name of its own; pip uninstall {plugin.distribution} "
                        "(or RESOLVER_DISABLE_PLUGINS=1) runs without it",
                    )
                self._builtins[name] = (target, None, None)
                self._from_plugins[name] = plugin.title

    def _import_builtin(self, name: str) -> type[T]:
        """Import the catalogued ``name`` (a clear error if its engine's package is missing)."""
        target, package, install = self._builtins[name]
        if package is not None and importlib.util.find_spec(package) is None:
            raise MissingDependencyError(f"{self.kind} {name!r}", package, install)
        with _LOADING:  # another thread waits until the class is imported
            if name in self._classes:
                return self._classes[name]
            module, _, qualname = target.partition(":")  # every entry is "module:Class"
            try:
                self._classes.setdefault(name, getattr(importlib.import_module(module), qualname))
            except (ImportError, AttributeError) as exc:
                if name not in self._from_plugins:
                    raise
                raise RuntimeConfigError(
                    f"{self._from_plugins[name]} names {target} as {self.kind} {name!r}, which cannot be "
                    f"imported: {type(exc).__name__}: {exc}",
                    hint="reinstall or fix the plugin, or set RESOLVER_DISABLE_PLUGINS=1 to run without it",
                ) from exc
            self._builtins.pop(name, None)
            return self._classes[name]

    @overload
    def register(self, name: str, cls: None = None, *, replace: bool = False) -> Callable[[C], C]: ...

    @overload
    def register(self, name: str, cls: C, *, replace: bool = False) -> C: ...

    def register(self, name: str, cls: Any = None, *, replace: bool = False) -> Any:
        """Register ``cls`` under ``name``; without ``cls``, return a class decorator.

        Registering a name twice is an error unless ``replace=True`` (so two plugins cannot
        silently shadow each other).
        """

        def decorate(klass: C) -> C:
            if not isinstance(klass, type):
                raise TypeError(f"register a class as {self.kind} {name!r}, got {klass!r}")
            with _LOADING:
                current = self._classes.get(name)
                if current is None and not replace and name in self._builtins:
                    target, package, _ = self._builtins[name]
                    if package is None and target != _path(klass):
                        current = self._import_builtin(name)  # to say which class holds the name
                if current is not None and not replace and current is not klass:
                    raise ValueError(
                        f"{self.kind} {name!r} is already registered to {current.__qualname__}; "
                        "pass replace=True to override it"
                    )
                self._classes[name] = klass
                self._builtins.pop(name, None)
            return klass

        return decorate if cls is None else decorate(cls)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (mainly for tests that register temporary classes)."""
        with _LOADING:
            self._classes.pop(name, None)
            if name in self._builtins and self._builtins[name][1] is None:
                del self._builtins[name]

    def get(self, name: str) -> type[T]:
        """The class registered under ``name``, or a clear error saying what is missing."""
        found = self._classes.get(name)
        if found is not None:
            return found
        if name not in self._builtins:
            self._add_plugins()
        if name in self._builtins:
            return self._import_builtin(name)
        known = ", ".join(repr(n) for n in self.names())
        raise RuntimeConfigError(
            f"unknown {self.kind} {name!r}; registered {self.kind}s are {known}",
            hint=f"register your class with runtime.register_{self.kind.replace(' ', '_')}({name!r})",
        )

    def names(self) -> tuple[str, ...]:
        """Every known name, implemented or optional, sorted."""
        self._add_plugins()
        return tuple(sorted({*self._classes, *self._builtins}))

    def _available(self) -> set[str]:
        """The names a look-up needs no separate package for."""
        self._add_plugins()
        return {*self._classes, *(name for name, entry in self._builtins.items() if entry[1] is None)}

    def __contains__(self, name: object) -> bool:
        return name in self._available()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._available()))


def plugin_components(kind: str) -> list[tuple[Plugin, str, str]]:
    """``(plugin, name, "module:Class")`` for each runtime class of ``kind`` the installed plugins
    name (``cluster environment`` is written ``cluster_environment`` there). A kind no registry has
    is an error naming the plugin: a misspelt kind would otherwise leave its classes unknown."""
    from resolver.plugins import load_plugins

    found = []
    for plugin in load_plugins():
        for written, entries in plugin.components.items():
            if written.replace("_", " ") not in BUILTINS:
                known = ", ".join(sorted(k.replace(" ", "_") for k in BUILTINS))
                raise RuntimeConfigError(
                    f"{plugin.title}: COMPONENTS names the kind {written!r}, which is not one of {known}",
                    hint="fix the plugin's COMPONENTS, or set RESOLVER_DISABLE_PLUGINS=1 to run without it",
                )
            if written.replace("_", " ") == kind:
                found += [(plugin, name, target) for name, target in entries.items()]
    return found


STRATEGIES: Registry[Strategy] = Registry("strategy", BUILTINS["strategy"])
ACCELERATORS: Registry[Accelerator] = Registry("accelerator", BUILTINS["accelerator"])
PRECISIONS: Registry[Precision] = Registry("precision", BUILTINS["precision"])
COLLECTIVES: Registry[Collective] = Registry("collective", BUILTINS["collective"])
LAUNCHERS: Registry[Launcher] = Registry("launcher", BUILTINS["launcher"])
CLUSTER_ENVIRONMENTS: Registry[ClusterEnvironment] = Registry("cluster environment", BUILTINS["cluster environment"])


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
