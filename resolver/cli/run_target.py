"""What ``resolver run`` starts: a script path, or a module with ``-m``, checked before any rank starts.

Each check returns the usage error to print (exit code 2), naming what was wrong and the fix, or
None when the target can be started. Nothing here imports the user's code: a module is looked up
by its top-level package only, where ``python -m`` would look (the current folder, then the path).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

from resolver._engine.suggest import did_you_mean

__all__ = ["module_problem", "script_problem"]

_SCRIPT_HELP = "give the path of the Python file to run, or -m NAME to run a module (resolver run --help)"


def _python_files(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" and p.is_file())
    except OSError:
        return []


def _unreadable(script: str, path: Path) -> str | None:
    """Why the file ``script`` cannot be read by this user (every rank would fail to open it), or None."""
    try:
        with path.open("rb") as file:
            file.read(1)
    except OSError as exc:
        why = exc.strerror or str(exc)
        readable = f"make it readable by this user (chmod u+r {script})"
        fix = readable if isinstance(exc, PermissionError) else _SCRIPT_HELP
        return f"error: script {script!r} cannot be read: {why}\n  = help: {fix}"
    return None


def script_problem(script: str) -> str | None:
    """Why ``script`` cannot be run as a script, or None."""
    path = Path(script)
    if path.is_file():
        return _unreadable(script, path)
    if path.is_dir():
        files = [f for f in _python_files(path) if f != "__init__.py"]
        lines = [f"error: {script!r} is a folder, not a script"]
        if "__main__.py" in files:
            lines.append(f"  = help: run its __main__.py: resolver run {path / '__main__.py'}")
        elif files:
            shown = ", ".join(files[:5]) + (", ..." if len(files) > 5 else "")
            lines.append(f"  = help: name the file to run, e.g. resolver run {path / files[0]} (it holds {shown})")
        else:
            lines.append(f"  = help: {_SCRIPT_HELP}")
        package = ".".join(path.parts)
        if (path / "__init__.py").is_file() and not path.is_absolute() and all(p.isidentifier() for p in path.parts):
            target = package if "__main__.py" in files else f"{package}.{Path(files[0]).stem}" if files else ""
            if target:
                lines.append(f"  = help: or run it as a module, as python -m does: resolver run -m {target}")
        return "\n".join(lines)
    if path.exists():
        return f"error: {script!r} is not a regular file (a device, a pipe or a socket)\n  = help: {_SCRIPT_HELP}"
    lines = [f"error: script {script!r} not found (looked in {os.getcwd()})"]
    folder = path.parent if path.parent.is_dir() else None
    close = did_you_mean(path.name, _python_files(folder)) if folder is not None else ""
    if close:
        lines.append(f"  = help: {close}")
    if path.suffix != ".py" and all(part.isidentifier() for part in script.split(".")):
        lines.append(f"  = help: to run the module {script!r}, add -m: resolver run -m {script}")
    else:
        lines.append(f"  = help: {_SCRIPT_HELP}")
    return "\n".join(lines)


def module_problem(name: str) -> str | None:
    """Why ``python -m name`` would not find the module, or None (its top-level package is found)."""
    parts = name.split(".")
    if name.endswith(".py") and Path(name).is_file():
        return f"error: -m takes a module name, not a file: {name!r}\n  = help: resolver run {name} (or -m {name[:-3]})"
    if not all(part.isidentifier() for part in parts):
        fix = f"resolver run {name}" if Path(name).is_file() else "resolver run -m package.module"
        return f"error: -m takes a module name (dotted, like package.train), not {name!r}\n  = help: {fix}" + (
            " (a file runs without -m)" if Path(name).is_file() else ""
        )
    top = parts[0]
    if top in sys.builtin_module_names:
        return None
    search = [os.getcwd(), *sys.path[1:]]  # python -m puts the current folder first
    if importlib.machinery.PathFinder.find_spec(top, search) is not None:
        return None
    return (
        f"error: no module named {top!r} (looked in the current folder {os.getcwd()} and this Python's path)\n"
        f"  = help: run from the folder that holds {top}, install it (pip install -e .), "
        "or give a script's path without -m"
    )
