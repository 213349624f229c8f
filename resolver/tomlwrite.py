"""A small TOML writer for the shapes this project writes: golden scenarios and rule files.

Top-level tables become ``[section]`` headers, arrays of tables ``[[section]]``; tables nested
inside those are written inline. ``None`` cannot be written (TOML has no null): leave it out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML: {value!r}")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _section(lines: list[str], path: list[str], table: Mapping[str, Any]) -> None:
    scalars = [
        (k, v) for k, v in table.items() if v is not None and not isinstance(v, Mapping) and not _is_table_array(v)
    ]
    for key, value in scalars:
        lines.append(f"{_key(str(key))} = {_value(value)}")
    for key, value in table.items():
        if isinstance(value, Mapping):
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in [*path, str(key)]) + "]")
            _section(lines, [*path, str(key)], value)
    for key, value in table.items():
        if _is_table_array(value):
            for item in value:
                lines.append("")
                lines.append("[[" + ".".join(_key(p) for p in [*path, str(key)]) + "]]")
                for k, v in item.items():
                    if v is not None:
                        lines.append(f"{_key(str(k))} = {_value(v)}")


def dumps(document: Mapping[str, Any]) -> str:
    """TOML text for ``document``."""
    lines: list[str] = []
    _section(lines, [], document)
    text = "\n".join(lines).lstrip("\n")
    return text + "\n"
