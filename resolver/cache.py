"""The compiled rule table, cached on disk so a new process skips parsing and compiling.

The cache key is a hash of the engine version, the Python version and every rule file's name
and text, so editing any rule file (or upgrading) makes a new entry. Entries are written to a
temporary file and renamed into place, so readers never see half a file; an entry that cannot be
read (truncated, corrupt, from an incompatible build) is ignored and the table compiled again.

The folder is ``$RESOLVER_CACHE_DIR`` if set, else the user cache folder (``$XDG_CACHE_HOME``
or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) +
``/resolver``. ``RESOLVER_CACHE_DIR=off`` (or an unwritable folder) disables it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from resolver.compiler import CompiledTable
from resolver.conditions import Condition
from resolver.functions import FUNCTIONS
from resolver.table import RuleSource

__all__ = ["cache_dir", "cache_key", "cached_table"]

#: Bump when the pickled shape of a compiled table changes.
CACHE_FORMAT = 1
#: Entries kept per folder; older ones (edited rule files, upgrades) are removed when one is written.
MAX_ENTRIES = 32
_OFF = ("off", "0", "none", "false")


def cache_dir() -> Path | None:
    """Where compiled tables are kept, or None when caching is off."""
    configured = os.environ.get("RESOLVER_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in _OFF or not configured.strip() else Path(configured)
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "resolver"


def cache_key(sources: Sequence[RuleSource]) -> str:
    from resolver import __version__

    digest = hashlib.sha256()
    for part in (f"format={CACHE_FORMAT}", f"engine={__version__}", f"python={sys.version}"):
        digest.update(part.encode() + b"\0")
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.text.encode() + b"\0")
    return digest.hexdigest()


class _Pickler(pickle.Pickler):
    """Conditions hold closures; they are pickled as the data they are built from."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Condition:
            return _rebuild_condition, (obj.slot, obj.ops, self.domains)
        return NotImplemented

    domains: Any = None


def _rebuild_condition(slot: str, ops: Any, domains: Any) -> Condition:
    return Condition.build(slot, ops, domains)


def _load(path: Path) -> CompiledTable | None:
    import gc

    enabled = gc.isenabled()
    gc.disable()  # unpickling makes many objects and no cycles: collecting meanwhile only costs time
    try:
        with path.open("rb") as f:
            table = pickle.load(f)
    except Exception:  # a corrupt or foreign entry is not an error: compile instead
        return None
    finally:
        if enabled:
            gc.enable()
    if not isinstance(table, CompiledTable) or not table.functions <= FUNCTIONS.keys():
        return None  # a function the table calls is not registered here: compiling says so
    return table


def _store(directory: Path, path: Path, table: CompiledTable) -> None:
    import tempfile

    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as f:
                pickler = _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
                pickler.domains = table.domains
                pickler.dump(table)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        entries = sorted(directory.glob("table-*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[MAX_ENTRIES:]:
            old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # a cache that cannot be written only costs time


def cached_table(
    sources: Sequence[RuleSource], compile_sources: Callable[[Sequence[RuleSource]], CompiledTable]
) -> CompiledTable:
    """The compiled table for ``sources``: from the disk cache when an entry matches, else compiled and stored."""
    directory = cache_dir()
    if directory is None:
        return compile_sources(sources)
    path = directory / f"table-{cache_key(sources)}.pickle"
    table = _load(path) if path.is_file() else None
    if table is None:
        table = compile_sources(sources)
        _store(directory, path, table)
    return table
