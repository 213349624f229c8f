"""Named, pure functions that rules may call to compute a value (``set = { x = { fn = ... } }``).

Each takes slot values and returns a value; bad input raises :class:`InvalidInput`, which the
engine turns into a :class:`~resolver.errors.ResolutionError` naming the rule and the inputs.
Register more with :func:`register_function`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FUNCTIONS", "InvalidInput", "register_function"]

FUNCTIONS: dict[str, Callable[..., Any]] = {}


class InvalidInput(Exception):
    """A function's input cannot be interpreted; carries the fix."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def register_function(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` under ``name`` for use in rule files. Functions must be pure."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        FUNCTIONS[name] = fn
        return fn

    return decorate


_DEVICES_FORMS = "an int >= 1, -1 for all, a string such as '2', '-1', '0,1' or '1,', or a list of ids like [0, 2]"


def _devices_error(value: Any, problem: str) -> InvalidInput:
    shown = list(value) if isinstance(value, tuple) else value  # a list the user wrote stays a list
    return InvalidInput(f"devices={shown!r} {problem}", f"pass devices as {_DEVICES_FORMS}")


def _ids(items: Sequence[Any], original: Any) -> tuple[int, ...]:
    ids: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise _devices_error(original, f"contains {item!r}, which is not a device index")
        if isinstance(item, str):
            if not item.strip().isdigit():
                raise _devices_error(original, f"contains {item!r}, which is not a device index")
            item = int(item)
        if item < 0:
            raise _devices_error(original, f"contains the negative index {item}")
        if item in ids:
            raise _devices_error(original, f"names device {item} twice")
        ids.append(item)
    if not ids:
        raise _devices_error(original, "selects no device")
    return tuple(ids)


@register_function("parse_devices")
def parse_devices(value: Any) -> str | int | tuple[int, ...]:
    """Normalize a ``devices`` flag to ``"auto"``, ``-1`` (all), a count ``N`` or a tuple of ids."""
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, bool):
        raise _devices_error(value, "is a boolean")
    if isinstance(value, int):
        if value == -1 or value >= 1:
            return value
        raise _devices_error(value, "selects no device" if value == 0 else "is negative")
    if isinstance(value, (list, tuple)):
        return _ids(value, value)
    if isinstance(value, str):
        text = value.strip()
        if text == "-1":
            return -1
        if "," in text:
            parts = [p.strip() for p in text.split(",")]
            return _ids([p for p in parts if p] if parts[-1] == "" else parts, value)
        if text.isdigit():
            if int(text) == 0:
                raise _devices_error(value, "selects no device")
            return int(text)
        raise _devices_error(value, "is not a device count or list of ids")
    raise _devices_error(value, f"has type {type(value).__name__}")


@register_function("to_text")
def to_text(value: Any) -> str | None:
    """A flag as lowercase text (``16`` -> ``"16"``); None stays None."""
    if value is None:
        return None
    return str(value).strip().lower()


@register_function("to_int")
def to_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    raise InvalidInput(f"{value!r} is not an integer", "use a whole number")


@register_function("count")
def count(ids: Sequence[Any]) -> int:
    return len(ids)


@register_function("first_ids")
def first_ids(n: int) -> tuple[int, ...]:
    """Device ids ``0..n-1``."""
    return tuple(range(int(n)))


@register_function("multiply")
def multiply(a: Any, b: Any) -> int:
    return to_int(a) * to_int(b)



@register_function("floor_divide")
def floor_divide(a: Any, b: Any) -> int:
    divisor = to_int(b)
    if divisor <= 0:
        raise InvalidInput(f"cannot divide by {b!r}", "check the cluster's process count variables")
    return to_int(a) // divisor


@register_function("local_rank_in_world")
def local_rank_in_world(node_rank: Any, num_devices: Any, local_rank: Any) -> int:
    """Global rank of a process: ``node_rank * num_devices + local_rank``."""
    return to_int(node_rank) * to_int(num_devices) + to_int(local_rank)




@register_function("lsf_node_rank")
def lsf_node_rank(hosts: str | None, hostname: str) -> int:
    """Node rank from ``LSB_MCPU_HOSTS`` ("launch 1 node-a 40 node-b 40"): index among compute hosts."""
    if not hosts:
        return 0
    names = hosts.split()[0::2]
    compute = names[1:] if len(names) > 1 else names
    unique = list(dict.fromkeys(compute))
    if hostname not in unique:
        raise InvalidInput(
            f"this host ({hostname}) is not in LSB_MCPU_HOSTS ({hosts})",
            "run under jsrun/bsub so LSF describes this host, or pass cluster_environment='local'",
        )
    return unique.index(hostname)


@register_function("pick_plugin")
def pick_plugin(plugins: Sequence[str], members: Sequence[str]) -> str | None:
    """The plugin name that belongs to a domain (given as ``{ domain = ... }``); two are an error."""
    found = [p for p in plugins if p in members]
    if len(found) > 1:
        raise InvalidInput(
            f"plugins name {len(found)} of the same kind ({', '.join(repr(p) for p in found)})",
            f"keep one of {', '.join(repr(p) for p in found)}",
        )
    return found[0] if found else None


@register_function("first_unknown")
def first_unknown(items: Sequence[str], members: Sequence[str]) -> str | None:
    """The first item that is not a member (an unknown plugin name)."""
    for item in items:
        if item not in members:
            return str(item)
    return None


@register_function("ids_not_in")
def ids_not_in(ids: Sequence[int], visible: Sequence[int]) -> tuple[int, ...] | None:
    """The requested ids that are not visible; None when all are."""
    missing = tuple(i for i in ids if i not in visible)
    return missing or None


@register_function("available_accelerators")
def available_accelerators(xla_count: int, torch_xla: bool, mps: bool, cuda_count: int) -> tuple[str, ...]:
    """The accelerators a machine offers, in the order ``auto`` tries them."""
    found = []
    if xla_count > 0 and torch_xla:
        found.append("xla")
    if mps:
        found.append("mps")
    if cuda_count > 0:
        found.append("cuda")
    found.append("cpu")
    return tuple(found)


@register_function("rankfile_node_rank")
def rankfile_node_rank(text: str, hostname: str) -> int:
    """Node rank from LSF's rank file (``LSB_DJOB_RANKFILE``): one host per line, the first line is
    the launch node; the rank is this host's place among the distinct compute hosts."""
    hosts = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    unique = list(dict.fromkeys(hosts))
    if hostname not in unique:
        raise InvalidInput(
            f"this host ({hostname}) is not among the compute hosts of the LSF rank file "
            f"({', '.join(unique) or 'none'})",
            "run under jsrun inside the LSF job that wrote LSB_DJOB_RANKFILE, or pass cluster_environment='local'",
        )
    return unique.index(hostname)
