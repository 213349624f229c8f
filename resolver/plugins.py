"""Plugins: installed packages that add rule files, machine-fact probes and runtime components.

A package declares one module in the entry-point group ``resolver.plugins`` (its ``pyproject.toml``)::

    [project.entry-points."resolver.plugins"]
    npu = "npu_plugin"

That module is imported once per process, the first time a rule table is loaded, a machine fact is
probed or a runtime component is looked up (never by ``import resolver``), and may:

- name rule files in ``RULES``: a file or folder of TOML rule files, or a list of them, relative to
  the module's folder; they are loaded after the built-in ones whenever the built-in table is;
- register probes with ``resolver.register_probe`` when imported (rules read them as ``env.NAME``);
- name runtime classes in ``COMPONENTS``: ``{"accelerator": {"npu": "npu_plugin.accelerator:NPUAccelerator"}}``
  (kinds: those of :mod:`runtime.catalog`, ``cluster_environment`` for the clusters), imported on
  first use as the built-ins are.

``resolve()``, ``resolver explain``, ``resolver run`` and ``runtime.launch`` all read the one list
:func:`load_plugins` returns. ``RESOLVER_DISABLE_PLUGINS=1`` turns discovery off (as
``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` does for pytest). A plugin that cannot be imported, names a rule
path that is not there or ships a broken rule file is an error naming its distribution, version and
the file (:class:`PluginError`, or the :class:`~resolver._engine.errors.RuleTableError` of the file).

Finding the entry points costs ``importlib.metadata`` (tens of milliseconds: it imports ``email``,
``zipfile``, ``pathlib`` and reads every installed distribution). What it found is kept in the cache
folder (:mod:`resolver._store.cache`), one entry per ``sys.path``, with what each of its entries was
when it was found: its modification time and whether it held distributions (``*.dist-info``,
``*.egg-info``). Installing, upgrading or removing a distribution adds or removes one of those in
its site folder, which changes that folder's time, so the entry is used while every folder that
held distributions has its time, and every other one still holds none (the script's folder and
the current one change whenever a file is written there: only those are listed again). A process
then spends one ``stat`` per ``sys.path`` entry and reads one small file, where listing each folder
cost it 0.3-0.6 ms and ``importlib.metadata`` 40 to 60 (measured with no plugin installed).
"""

from __future__ import annotations

import _thread
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from resolver._engine.errors import ResolutionError, RuleTableError

__all__ = [
    "DISABLE_VARIABLE",
    "ENTRY_POINT_GROUP",
    "Plugin",
    "PluginError",
    "checked_plugins",
    "importing",
    "load_plugins",
    "naming_plugin_files",
    "plugins_disabled",
]

ENTRY_POINT_GROUP = "resolver.plugins"
DISABLE_VARIABLE = "RESOLVER_DISABLE_PLUGINS"
_OFF_VALUES = ("", "0", "false", "no", "off")
#: Bump when the shape of the discovery cache's entries changes.
_DISCOVERY_FORMAT = 2
_DISCOVERY_PATTERN = "plugins-*.marshal"
_DISCOVERY_KEEP = 16
_METADATA = (".dist-info", ".egg-info")


class PluginError(ResolutionError):
    """An installed plugin cannot be used: names its distribution, version, entry point and the file."""


class Plugin:
    """One installed plugin: where it was declared and what its module contributes.

    A plain class, not attrs: it is made in every process that loads a table, and an attrs class
    costs that process about a millisecond to create."""

    __slots__ = ("name", "target", "distribution", "version", "rules", "components", "problem")

    def __init__(
        self,
        name: str,
        target: str,
        distribution: str,
        version: str,
        rules: tuple[str, ...] = (),
        components: Mapping[str, Mapping[str, str]] | None = None,
        problem: str | None = None,
    ) -> None:
        #: The entry point's name and value (the module, or ``module:object``).
        self.name, self.target = name, target
        self.distribution, self.version = distribution, version
        #: Rule files and folders (absolute paths), loaded after the built-in table.
        self.rules = rules
        #: Runtime classes: kind (``accelerator``, ``cluster_environment``, ...) -> name -> ``module:Class``.
        self.components: Mapping[str, Mapping[str, str]] = components or {}
        #: Why it could not be loaded (None: loaded).
        self.problem = problem

    def __repr__(self) -> str:
        return f"<{self.title}{': ' + self.problem if self.problem else ''}>"

    @property
    def title(self) -> str:
        """``npu-plugin 0.1.0 (entry point npu = npu_plugin)``: how messages name it."""
        return f"plugin {self.distribution} {self.version} (entry point {self.name} = {self.target!r})"

    def error(self) -> PluginError:
        return PluginError(
            f"{self.title}: {self.problem}",
            hint=f"fix or uninstall it (pip uninstall {self.distribution}); "
            f"{DISABLE_VARIABLE}=1 runs without any plugin",
        )


def plugins_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``RESOLVER_DISABLE_PLUGINS`` turns discovery off (any value but empty, 0, false, no, off)."""
    value = (os.environ if environ is None else environ).get(DISABLE_VARIABLE)
    return value is not None and value.strip().lower() not in _OFF_VALUES


#: The plugins of this process, once loaded (:func:`load_plugins`).
_LOADED: tuple[Plugin, ...] | None = None
#: The plugins loaded so far while :func:`load_plugins` runs (what a plugin module importing another sees).
_PARTIAL: list[Plugin] | None = None
#: Another thread waits for the list (``_thread``: ``threading`` would cost an import here).
_LOCK = _thread.RLock()
#: The distribution whose module is being imported now (probes registered meanwhile are its own).
_IMPORTING: list[str] = []


def importing() -> str | None:
    """The distribution whose plugin module is being imported now, if any (for :func:`resolver.register_probe`)."""
    return _IMPORTING[-1] if _IMPORTING else None


def load_plugins() -> tuple[Plugin, ...]:
    """Every installed plugin, its module imported: found and imported once per process.

    Never raises: a plugin that cannot be loaded carries its ``problem`` (:func:`checked_plugins`
    raises it)."""
    global _LOADED, _PARTIAL
    loaded = _LOADED
    if loaded is not None:
        return loaded
    with _LOCK:
        if _LOADED is not None:
            return _LOADED
        if _PARTIAL is not None:  # this thread, from a plugin module being imported: the plugins before it
            return tuple(_PARTIAL)
        _PARTIAL = []
        try:
            for name, target, distribution, version in _discover():
                _PARTIAL.append(_load(name, target, distribution, version))
            _LOADED = tuple(_PARTIAL)
        finally:
            _PARTIAL = None
        return _LOADED


def checked_plugins() -> tuple[Plugin, ...]:
    """:func:`load_plugins`, raising the :class:`PluginError` of the first plugin that did not load."""
    loaded = load_plugins()
    for plugin in loaded:
        if plugin.problem is not None:
            raise plugin.error()
    return loaded


@contextmanager
def naming_plugin_files(plugins: tuple[Plugin, ...]) -> Iterator[None]:
    """A :class:`RuleTableError` raised inside about a plugin's rule file also names the plugin."""
    try:
        yield
    except RuleTableError as error:
        owner = _owner(plugins, error.file)
        if owner is None:
            raise
        raise RuleTableError(
            f"{error.message} (a rule file of {owner.title}; fix or uninstall it: pip uninstall "
            f"{owner.distribution}, or set {DISABLE_VARIABLE}=1)",
            file=error.file,
            rule=error.rule,
            line=error.line,
        ) from None


def _owner(plugins: tuple[Plugin, ...], file: str | None) -> Plugin | None:
    if not file:
        return None
    for plugin in plugins:
        for path in plugin.rules:
            if file == path or file.startswith(path.rstrip(os.sep) + os.sep):
                return plugin
    return None


# -- importing one plugin's module ----------------------------------------------------------------


def _load(name: str, target: str, distribution: str, version: str) -> Plugin:
    plugin = Plugin(name, target, distribution, version)
    module_name, _, attribute = target.partition(":")
    module_name, attribute = module_name.strip(), attribute.strip()
    import importlib

    _IMPORTING.append(distribution)
    try:
        module = importlib.import_module(module_name)
        namespace = _attribute(module, attribute) if attribute else module
    except Exception as exc:  # whatever a third party's import raises, the user sees whose it is
        plugin.problem = _import_problem(module_name, exc)
        return plugin
    finally:
        _IMPORTING.pop()
    folder = os.path.dirname(os.path.abspath(getattr(module, "__file__", None) or "."))
    try:
        plugin.rules = _rule_paths(getattr(namespace, "RULES", ()), folder, module_name)
        plugin.components = _components(getattr(namespace, "COMPONENTS", {}), module_name)
    except ValueError as exc:
        plugin.problem = str(exc)
    return plugin


def _attribute(module: Any, path: str) -> Any:
    value = module
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _import_problem(module_name: str, exc: BaseException) -> str:
    """What went wrong importing ``module_name``, and where: the file and line of the plugin's code."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
        return f"its module {module_name!r} cannot be found (the entry point names a module the package does not have)"
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"its module {module_name!r} does not compile: {exc.filename}:{exc.lineno}: {exc.msg}"
    where = ""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename + f":{tb.tb_lineno}")
        tb = tb.tb_next
    own = [frame for frame in frames if not frame.startswith("<")]  # not the import machinery's frozen frames
    if own:
        where = f" at {own[-1]}"
    return f"importing its module {module_name!r} failed{where}: {type(exc).__name__}: {exc}"


def _rule_paths(value: Any, folder: str, module_name: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str | os.PathLike) else list(value or ())
    paths = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise ValueError(f"{module_name}.RULES holds {item!r}; it names rule files or folders (text)")
        path = os.path.normpath(os.path.join(folder, os.fspath(item)))
        if not os.path.exists(path):
            raise ValueError(f"{module_name}.RULES names {path}, which does not exist (a file the package left out?)")
        paths.append(path)
    return tuple(paths)


def _components(value: Any, module_name: str) -> dict[str, dict[str, str]]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{module_name}.COMPONENTS must map a kind to {{name: 'module:Class'}}, got {value!r}")
    components: dict[str, dict[str, str]] = {}
    for kind, entries in value.items():
        if not isinstance(entries, Mapping):
            raise ValueError(f"{module_name}.COMPONENTS[{kind!r}] must map names to 'module:Class', got {entries!r}")
        for component, where in entries.items():
            if not isinstance(where, str) or where.count(":") != 1 or not all(where.split(":")):
                raise ValueError(f"{module_name}.COMPONENTS[{kind!r}][{component!r}] = {where!r}: write 'module:Class'")
        components[str(kind)] = {str(component): where for component, where in entries.items()}
    return components


# -- finding the entry points, through the cache folder --------------------------------------------


def _discover() -> tuple[tuple[str, str, str, str], ...]:
    """``(name, target, distribution, version)`` of every entry point of the group, sorted by distribution."""
    if plugins_disabled():
        return ()
    from resolver._store.cache import private_folder

    folder = private_folder(create=True)
    if folder is None:
        return _entry_points()
    from resolver._store.cache import _name

    key = (f"format={_DISCOVERY_FORMAT}", f"group={ENTRY_POINT_GROUP}", f"python={sys.version}", *sys.path)
    path = os.path.join(folder, f"plugins-{_name(key)}.marshal")
    found = _read(path, key)
    if found is None:
        folders = _folders()  # before looking: an install meanwhile is seen by the next process
        found = _entry_points()
        _write(folder, path, key, folders, found)
    return found


#: The time of a ``sys.path`` entry that is not there (:func:`_mtime`).
_MISSING = -1


def _mtime(entry: str) -> int:
    try:
        return os.stat(entry or ".").st_mtime_ns
    except OSError:
        return _MISSING


def _holds_distributions(entry: str) -> bool:
    """Whether a ``sys.path`` entry holds distributions: a folder holding metadata, or a zip file.
    A folder that cannot be listed holds none ``importlib.metadata`` could find (it skips it too)."""
    try:
        return any(name.endswith(_METADATA) for name in os.listdir(entry or "."))
    except NotADirectoryError:
        return True
    except OSError:
        return False


def _folders() -> tuple[tuple[int, bool], ...]:
    """Each ``sys.path`` entry's modification time and whether it holds distributions."""
    times = [_mtime(entry) for entry in sys.path]
    return tuple((t, t != _MISSING and _holds_distributions(e)) for e, t in zip(sys.path, times, strict=True))


def _unchanged(folders: tuple[tuple[int, bool], ...]) -> bool:
    """Whether the distributions on ``sys.path`` are those found when its entries were ``folders``:
    every entry that held distributions has the same time, every other one still holds none."""
    if len(folders) != len(sys.path):
        return False
    for entry, (then, held) in zip(sys.path, folders, strict=True):
        now = _mtime(entry)
        if now != then and (held or _MISSING in (now, then) or _holds_distributions(entry)):
            return False
    return True


def _entry_points() -> tuple[tuple[str, str, str, str], ...]:
    import importlib.metadata

    found = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = entry.dist
        found.append((entry.name, entry.value, dist.name if dist else "?", dist.version if dist else "?"))
    return tuple(sorted(found, key=lambda item: (item[2].lower(), item[0])))


def _read(path: str, key: tuple[str, ...]) -> tuple[tuple[str, str, str, str], ...] | None:
    import marshal

    from resolver._store.cache import open_entry

    f = open_entry(path)
    if f is None:
        return None
    try:
        with f:
            stored, folders, found = marshal.load(f)
    except (OSError, ValueError, EOFError, TypeError):
        return None  # truncated or foreign: discover again
    if stored != key or not isinstance(found, tuple) or not isinstance(folders, tuple):
        return None
    if not all(isinstance(item, tuple) and len(item) == 4 and all(isinstance(s, str) for s in item) for item in found):
        return None
    if not all(isinstance(item, tuple) and len(item) == 2 for item in folders) or not _unchanged(folders):
        return None
    return found


def _write(
    folder: str,
    path: str,
    key: tuple[str, ...],
    folders: tuple[tuple[int, bool], ...],
    found: tuple[tuple[str, str, str, str], ...],
) -> None:
    import marshal

    from resolver._store.cache import write_entry

    try:
        entry = (key, folders, found)
        write_entry(folder, path, lambda f: marshal.dump(entry, f), _DISCOVERY_PATTERN, _DISCOVERY_KEEP)
    except OSError:
        pass  # a cache that cannot be written only costs time
