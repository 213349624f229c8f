"""The flags of ``resolve()``, declared once.

Everything else is derived from :data:`FLAGS`: the defaults (``FLAG_DEFAULTS``), the ``arg.*``
input slots, the canonical ``flag.*`` slots with their override variables and the rules that
turn an argument (or a variable) into one request (:func:`flag_rules_source`, compiled in front
of the rule files; :func:`flags_fingerprint` stands for them in the table cache's key), the command
line's options (``resolver/cli.py``), and the keyword arguments of ``resolver.resolve`` and
``runtime.launch`` (their typed signatures are checked against this declaration by
``tests/resolver/domain/test_flags.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from resolver._engine.table import FLAGS_SOURCE_NAME, RuleSource
from resolver._engine.values import fields_repr

__all__ = [
    "FLAGS",
    "FLAG_DEFAULTS",
    "FLAGS_SOURCE_NAME",
    "Flag",
    "collect_flags",
    "flag_rules_source",
    "flags_fingerprint",
]


# eq=False: one declaration per flag, compared by identity (as the engine's classes are)
@attrs.frozen(eq=False, kw_only=True)
class Flag:
    """One argument of ``resolve()``.

    ``annotation`` is the type hint the Python signatures carry; ``parse`` the rule function that
    turns the argument into its canonical ``flag.<name>`` value, whose slot has ``slot_type`` and,
    when given, ``domain`` (the accepted values, listed by ``--help``). ``variable`` is an
    environment variable that stands in for the argument when it is not given (an argument and
    a variable that disagree are a conflict). ``cli_type`` parses the command line's text.
    """

    name: str
    annotation: str
    default: Any
    help: str
    parse: str = "to_text"
    slot_type: str = "str"
    domain: str | None = None
    variable: str | None = None
    lowercase: bool = True
    cli_type: str | None = None
    #: The command line's option name when it is not the flag's own (``--plugin`` for ``plugins``).
    cli_name: str | None = None
    repeatable: bool = False
    #: The domains whose values ``--help`` lists, when not just ``domain``.
    help_domains: tuple[str, ...] = ()

    __repr__ = fields_repr

    @property
    def listed_domains(self) -> tuple[str, ...]:
        """The domains whose values the help lists."""
        return self.help_domains or ((self.domain,) if self.domain else ())

    @property
    def quoted(self) -> bool:
        """Whether messages quote the value (text flags: ``strategy='ddp'``)."""
        return self.slot_type == "str"

    def cli_spellings(self) -> tuple[str, ...]:
        """``--num-nodes`` first (shown by ``--help``), then ``--num_nodes`` (accepted too)."""
        name = self.cli_name or self.name
        dashed = f"--{name.replace('_', '-')}"
        return (dashed, f"--{name}") if "_" in name else (dashed,)


FLAGS: tuple[Flag, ...] = (
    Flag(
        name="accelerator",
        annotation="str",
        default="auto",
        help="the device kind",
        domain="accelerator_flag",
        variable="RESOLVER_ACCELERATOR",
    ),
    Flag(
        name="devices",
        annotation="int | str | Sequence[int]",
        default="auto",
        help="auto, N, -1 (all), or device ids ('0,1', '1,')",
        parse="parse_devices",
        slot_type="any",
        variable="RESOLVER_DEVICES",
        cli_type="devices",
    ),
    Flag(
        name="strategy",
        annotation="str",
        default="auto",
        help="how the work is spread over devices (or a registered name)",
        domain="strategy_flag",
        variable="RESOLVER_STRATEGY",
    ),
    Flag(
        name="precision",
        annotation="str | int | None",
        default=None,
        help="the numeric precision (default: 32-true)",
        domain="precision_flag",
        variable="RESOLVER_PRECISION",
    ),
    Flag(
        name="num_nodes",
        annotation="int",
        default=1,
        help="number of machines",
        parse="to_int",
        slot_type="int",
        variable="RESOLVER_NUM_NODES",
        cli_type="int",
    ),
    Flag(
        name="cluster_environment",
        annotation="str",
        default="auto",
        help="who started the processes (auto: detected)",
        domain="cluster_flag",
        variable="RESOLVER_CLUSTER_ENVIRONMENT",
    ),
    Flag(
        name="plugins",
        annotation="Sequence[str]",
        default=(),
        help="a cluster environment or precision given as a plugin (repeatable)",
        slot_type="tuple",
        domain="plugin",
        help_domains=("cluster", "precision_flag"),
        cli_name="plugin",
        repeatable=True,
    ),
    Flag(
        name="node_rank",
        annotation="int | None",
        default=None,
        help="this machine's index in a multi-node run started by hand (default: NODE_RANK, else 0)",
        parse="to_int",
        slot_type="int",
        cli_type="int",
    ),
    Flag(
        name="master_addr",
        annotation="str | None",
        default=None,
        help="address of the machine that runs rank 0 (default: MASTER_ADDR, or what the cluster says)",
        parse="as_text",
        variable="MASTER_ADDR",
        lowercase=False,
    ),
    Flag(
        name="master_port",
        annotation="int | None",
        default=None,
        help="port of rank 0's rendezvous (default: MASTER_PORT, or what the cluster says)",
        parse="to_int",
        slot_type="int",
        variable="MASTER_PORT",
        cli_type="int",
    ),
)

#: The flags of ``resolve()`` and their defaults ("not given").
FLAG_DEFAULTS: Mapping[str, Any] = {flag.name: flag.default for flag in FLAGS}
_BY_NAME = {flag.name: flag for flag in FLAGS}


def collect_flags(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The flags among a signature's ``locals()`` (or parsed CLI options), in declaration order."""
    return {flag.name: arguments[flag.name] for flag in FLAGS}


def flag(name: str) -> Flag:
    """The declaration of flag ``name``."""
    return _BY_NAME[name]


def _given(flag: Flag) -> dict[str, Any]:
    """The condition "the argument was given": not its default."""
    return {"set": True} if flag.default is None else {"ne": flag.default}


def _shown(flag: Flag, slot: str) -> str:
    return f"{flag.name}='{{{slot}}}'" if flag.quoted else f"{flag.name}={{{slot}}}"


def _slots(flag: Flag) -> dict[str, Any]:
    slots: dict[str, Any] = {
        f"arg.{flag.name}": {
            "stage": "input",
            "nullable": flag.default is None,
            "doc": f"the {flag.name} argument as given: {flag.help}",
        }
    }
    if flag.repeatable:  # a list of names: read by rules of its own, not one request
        return slots
    request: dict[str, Any] = {"stage": "normalized", "type": flag.slot_type}
    if flag.domain is not None:
        request["domain"] = flag.domain
        request["lowercase"] = flag.lowercase
    if flag.default is None:
        request["nullable"] = True
    else:
        request.update(required=True, default=flag.default)
    slots[f"flag.{flag.name}"] = request
    if flag.variable is not None:
        slots[f"override.{flag.name}"] = {
            "stage": "normalized",
            "type": flag.slot_type,
            "nullable": True,
            "doc": f"{flag.variable}, parsed",
        }
    return slots


def _rules(flag: Flag) -> list[dict[str, Any]]:
    """The one pattern every flag follows: argument > variable > (rules of the flag's own) > default."""
    if flag.repeatable:
        return []
    name, variable = flag.name, flag.variable
    rules: list[dict[str, Any]] = [
        {
            "id": f"flag.{name}.argument",
            "stage": "normalized",
            "when": {f"arg.{name}": _given(flag)},
            "set": {f"flag.{name}": {"fn": flag.parse, "args": [f"arg.{name}"]}},
            "priority": 20,
            "why": f"{name} was passed",
        }
    ]
    if variable is None:
        return rules
    rules += [
        {
            "id": f"override.{name}.read",
            "stage": "normalized",
            "when": {f"var.{variable}": {"set": True}},
            "set": {f"override.{name}": {"fn": flag.parse, "args": [f"var.{variable}"]}},
            "why": f"{variable} is set",
        },
        {
            "id": f"flag.{name}.override",
            "stage": "normalized",
            "when": {f"override.{name}": {"set": True}},
            "set": {f"flag.{name}": {"ref": f"override.{name}"}},
            "priority": 10,
            "why": f"{variable} overrides the default",
        },
        {
            "id": f"override.{name}.disagrees",
            "stage": "normalized",
            "when": {f"arg.{name}": _given(flag), f"override.{name}": {"ne": {"ref": f"flag.{name}"}}},
            "between": [f"flag.{name}", f"override.{name}"],
            "conflict": f"{_shown(flag, f'flag.{name}')} was passed, but {variable} asks for "
            + (f"'{{override.{name}}}'" if flag.quoted else f"{{override.{name}}}"),
            "hint": f"unset {variable}, or drop the {name} argument so the variable applies",
            "priority": 50,
        },
    ]
    return rules


def flag_rules_source() -> RuleSource:
    """The slots and rules every flag gets, as a rule source compiled before the rule files."""
    import tomli_w

    document: dict[str, Any] = {"slot": {}, "rule": []}
    for declared in FLAGS:
        document["slot"].update(_slots(declared))
        document["rule"] += _rules(declared)
    return RuleSource(FLAGS_SOURCE_NAME, tomli_w.dumps(document))


def flags_fingerprint() -> str:
    """What the flags' own rules are made from, for the compiled table cache's key: the declarations
    and the code that writes the rules (this module's file). Cheaper than writing the rules
    (:func:`flag_rules_source`), which only a compile needs."""
    try:
        with open(__file__, "rb") as f:
            code = f.read().decode("utf-8", "surrogateescape")
    except OSError:  # no readable file (a frozen build): the rules themselves
        code = flag_rules_source().text
    return f"{FLAGS!r}\0{code}"
