"""The built-in functions the rules call (``set = { x = { fn = ... } }``): device lists, host lists,
rank files, ports. Importing this module registers them (:mod:`resolver._domain.rule_tables` does, before
any table is compiled or run).

Each takes slot values and returns a value; bad input raises :class:`InvalidInput`, which the
engine turns into a :class:`~resolver._engine.errors.ResolutionError` naming the rule and the inputs.
Register more with :func:`register_function` (the registry is :mod:`resolver._engine.function_registry`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from resolver._engine.function_registry import FUNCTIONS, READS_UNSET, InvalidInput, call_problem, register_function
from resolver._engine.integers import MAX_DEVICES, parse_int
from resolver._engine.values import excerpt

__all__ = ["FUNCTIONS", "READS_UNSET", "InvalidInput", "call_problem", "register_function"]

_DEVICES_FORMS = (
    f"an int from 1 to {MAX_DEVICES}, -1 for all, a string such as '2', '-1', '0,1' or '1,', "
    "or a list of ids like [0, 2]"
)
_LIMIT_WHY = (
    f"at most {MAX_DEVICES} devices per node are supported: no machine has more, and a larger "
    "count (usually a typo) would build a list of that many device ids"
)


def _devices_error(value: Any, problem: str) -> InvalidInput:
    return InvalidInput(f"devices={excerpt(value)} {problem}", f"pass devices as {_DEVICES_FORMS}")


def _too_many(value: Any) -> InvalidInput:
    return InvalidInput(
        f"devices={excerpt(value)} asks for too many devices: {_LIMIT_WHY}", f"pass devices as {_DEVICES_FORMS}"
    )


def _ids(items: Sequence[int], original: Any) -> tuple[int, ...]:
    """Device ids, checked: each from 0 to the last id a node may have, none twice, at least one."""
    ids: list[int] = []
    for item in items:
        if item < 0:
            raise _devices_error(original, f"contains the negative index {item}")
        if item >= MAX_DEVICES:
            raise _devices_error(original, f"names device {item}, past the last id a node may have ({MAX_DEVICES - 1})")
        if item in ids:
            raise _devices_error(original, f"names device {item} twice")
        ids.append(item)
    if not ids:
        raise _devices_error(original, "selects no device")
    return tuple(ids)


_KINDS = {str: "text", bool: "a boolean"}


def _list_ids(value: Sequence[Any]) -> tuple[int, ...]:
    """The ids of a list or tuple: integers only, as PyTorch Lightning takes them (it refuses
    ``["0"]`` with a TypeError). The one rule for what a device list may hold: ``resolve()``, flags
    files and golden scenarios all reach it."""
    for item in value:
        if type(item) is not int:
            kind = _KINDS.get(type(item), f"a {type(item).__name__}")
            numbers = [parse_int(i) if isinstance(i, str) else i for i in value if type(i) in (int, str)]
            written = ", ".join(str(n) for n in numbers if n is not None)
            raise InvalidInput(
                f"devices={excerpt(value)} holds {excerpt(item)}, which is {kind}: a list of device ids holds integers",
                f"write the ids as integers (devices=[{written or 0}]), or as one string such as devices='0,1'",
            )
    return _ids(value, value)


@register_function("parse_devices")
def parse_devices(value: Any) -> str | int | tuple[int, ...]:
    """Normalize a ``devices`` flag to ``"auto"``, ``-1`` (all), a count ``N`` or a tuple of ids."""
    if type(value) is int and 0 < value <= MAX_DEVICES:  # the common case, at once
        return value
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, bool):
        raise _devices_error(value, "is a boolean")
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_DEVICES:
            raise _too_many(value)
        return _list_ids(value)
    if isinstance(value, str) and "," in value:
        if len(value) > 8 * MAX_DEVICES:
            raise _too_many(value)
        parts = [p.strip() for p in value.strip().split(",")]
        numbers = []
        for part in [p for p in parts if p] if parts[-1] == "" else parts:
            number = parse_int(part)
            if number is None:
                raise _devices_error(value, f"contains {excerpt(part)}, which is not a device index")
            numbers.append(number)
        return _ids(numbers, value)
    number = parse_int(value)
    if number is None:
        if isinstance(value, str):
            raise _devices_error(value, "is not a device count or list of ids")
        raise _devices_error(value, f"has type {type(value).__name__}")
    if number == -1:
        return -1
    if number == 0:
        raise _devices_error(value, "selects no device")
    if number < 0:
        raise _devices_error(value, "is negative")
    if number > MAX_DEVICES:
        raise _too_many(value)
    return number


@register_function("to_text")
def to_text(value: Any) -> str | None:
    """A flag as lowercase text (``16`` -> ``"16"``); None stays None."""
    if type(value) is str:
        return value.strip().lower()
    if value is None:
        return None
    return str(value).strip().lower()


@register_function("as_text")
def as_text(value: Any) -> str | None:
    """A flag as text with its case kept (host names); None stays None."""
    if value is None:
        return None
    return str(value).strip()


@register_function("to_int")
def to_int(value: Any) -> int:
    """A whole number from an int or integer text (``"-2"``); anything else is refused."""
    if type(value) is int:
        return value
    number = parse_int(value)
    if number is None:
        raise InvalidInput(f"{excerpt(value)} is not an integer", "use a whole number")
    return number


@register_function("count")
def count(ids: Sequence[Any]) -> int:
    return len(ids)


@register_function("first_ids")
def first_ids(n: int | str) -> tuple[int, ...]:
    """Device ids ``0..n-1`` (at most :data:`~resolver._engine.integers.MAX_DEVICES`); ``n`` may be a
    cluster's variable (``SLURM_NTASKS_PER_NODE``), integer text."""
    number = to_int(n)
    if number > MAX_DEVICES:
        raise InvalidInput(f"{number} devices: {_LIMIT_WHY}", f"ask for at most {MAX_DEVICES} devices per node")
    return tuple(range(max(number, 0)))


@register_function("multiply")
def multiply(a: Any, b: Any) -> int:
    return to_int(a) * to_int(b)


@register_function("floor_divide")
def floor_divide(a: Any, b: Any) -> int:
    divisor = to_int(b)
    if divisor <= 0:
        raise InvalidInput(f"cannot divide by {b!r}", "check the cluster's process count variables")
    return to_int(a) // divisor


@register_function("share")
def share(total: int, parts: int) -> int:
    """An even share of ``total`` among ``parts``, rounded down, at least 1 (``share(8, 3) == 2``)."""
    divisor = to_int(parts)
    if divisor <= 0:
        raise InvalidInput(f"cannot share among {parts!r}", "share among a positive count")
    return max(1, to_int(total) // divisor)


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


@register_function("unset_names", reads_unset=True)
def unset_names(names: Sequence[str], *values: Any) -> str | None:
    """The names whose value is unset, as text (``"WORLD_SIZE, GROUP_RANK"``); None when all are set.

    Called as ``unset_names(["RANK", "WORLD_SIZE"], var.RANK, var.WORLD_SIZE)``: one value per name.
    """
    if len(names) != len(values):
        raise InvalidInput(
            f"unset_names got {len(names)} name(s) but {len(values)} value(s)", "pass one slot per name, in order"
        )
    missing = [str(name) for name, value in zip(names, values, strict=True) if value is None]
    return ", ".join(missing) or None


@register_function("pick_plugin")
def pick_plugin(plugins: Sequence[str], members: Sequence[str]) -> str | None:
    """The plugin name that belongs to a domain (given as ``{ domain = ... }``); two are an error."""
    if not plugins:
        return None
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
    if not items:
        return None
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
def available_accelerators(order: tuple[str, ...], names: tuple[str, ...], *present: bool) -> tuple[str, ...]:
    """The accelerators a machine offers, in ``order``: the order ``auto`` tries them, which the
    priorities of the rules ``accelerator.auto.*`` declare (``{ order_of = "accelerator.auto" }``).
    Which are present each accelerator's file says (the slot ``accelerator.present.NAME``), given
    here as ``names`` and one flag per name (``{ slots_of = "accelerator.present" }``); one present
    that ``auto`` never picks comes last."""
    return _in_order(order, names, present)


@functools.lru_cache(maxsize=64)
def _in_order(order: tuple[str, ...], names: tuple[str, ...], flags: tuple[bool, ...]) -> tuple[str, ...]:
    # every resolve() asks: a machine has few answers, so each is worked out once
    present = {name for name, here in zip(names, flags, strict=True) if here}
    # one that auto never picks (no accelerator.auto.NAME rule) is still there: after the others
    return (*[name for name in order if name in present], *sorted(present.difference(order)))


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


# -- the rendezvous: where rank 0's store is -----------------------------------------------------


@register_function("first_host")
def first_host(hostlist: str) -> str:
    """The first host of a SLURM host list, as SLURM writes them: entries separated by commas or
    white space (``"alpha beta"``, ``"gpu[07-09,12],cpu1"``), each bracket a list of numbers and
    ranges whose first number is kept with its padding (``"gpu[007-009]"`` -> ``"gpu007"``), several
    brackets per name (``"rack[2-3]-n[01-04]"`` -> ``"rack2-n01"``)."""
    text = str(hostlist)
    depth, start = 0, None
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise _hostlist_error(hostlist, "has a bracket inside a bracket")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise _hostlist_error(hostlist, "closes a bracket it never opened")
        elif depth == 0 and (char == "," or char.isspace()):
            if start is not None:
                return _first_of(text[start:index], hostlist)
            continue
        if start is None:
            start = index
    if depth:
        raise _hostlist_error(hostlist, "leaves a bracket open")
    if start is None:
        raise InvalidInput(
            f"the host list {excerpt(hostlist)} names no host", "export MASTER_ADDR, or pass master_addr"
        )
    return _first_of(text[start:], hostlist)


def _first_of(entry: str, hostlist: str) -> str:
    """The first host of one entry of a host list (``"gpu[07-09,12]"`` -> ``"gpu07"``)."""

    def first(match: re.Match[str]) -> str:
        number = match.group(1).split(",")[0].split("-")[0].strip()
        if not number.isascii() or not number.isdigit():
            raise _hostlist_error(hostlist, f"has [{match.group(1)}], which is not a list of numbers and ranges")
        return number

    return re.sub(r"\[([^\]]*)\]", first, entry)  # compiled on first use: few processes read a host list


def _hostlist_error(hostlist: str, problem: str) -> InvalidInput:
    return InvalidInput(
        f"the host list {excerpt(hostlist)} {problem}",
        "export MASTER_ADDR (the first node's address), or pass master_addr",
    )


@register_function("rankfile_first_host")
def rankfile_first_host(text: str) -> str:
    """The first compute host of LSF's rank file: its first line is the launch node, which runs no
    rank (a file of one line names the host that runs everything)."""
    hosts = [line.strip() for line in text.splitlines() if line.strip()]
    compute = hosts[1:] or hosts
    if not compute:
        raise InvalidInput("the LSF rank file lists no hosts", "export MASTER_ADDR, or pass master_addr")
    return compute[0]


@register_function("port_from_job_id")
def port_from_job_id(job_id: str) -> int:
    """SLURM's rendezvous port, as PyTorch Lightning derives it so that every node computes the
    same: 15000 + the job id's last four digits."""
    # ASCII digits only: str.isdigit() also accepts "²", which int() rejects.
    digits = "".join(ch for ch in str(job_id) if ch in "0123456789")[-4:] or "0"
    return 15000 + int(digits)


@register_function("lsf_port_from_job_id")
def lsf_port_from_job_id(job_id: str) -> int:
    """LSF's rendezvous port, as PyTorch Lightning's LSFEnvironment derives it (so that processes
    it started and ours meet): 10000 + the job id modulo 1000."""
    number = parse_int(job_id)
    if number is None or number < 0:
        raise InvalidInput(
            f"LSB_JOBID={excerpt(job_id)} is not an LSF job id (a whole number)",
            "run inside an LSF job (bsub), or export MASTER_PORT with the same port on every node",
        )
    return 10000 + number % 1000


@register_function("did_you_mean")
def did_you_mean(value: Any, members: Sequence[str]) -> str:
    """`` (did you mean 'ddp'?)`` when ``value`` is close to a member of a domain, else ``""``.

    Made to end a conflict message: ``conflict = "unknown strategy '{flag.strategy}'{suggest.strategy}"``.
    """
    from resolver._engine.suggest import did_you_mean as suggestion

    found = suggestion(str(value), members)
    return f" ({found})" if found else ""
