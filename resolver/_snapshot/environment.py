"""A snapshot of the machine and cluster: the only input to resolution that is not a flag.

Rules never read ``os.environ``, files or hardware; they read an :class:`Environment`:

* machine facts (``env.NAME`` in rules), one per registered probe (:func:`register_probe`):
  ``cuda_device_count``, ``mps_available``, ``hostname``, ...;
* environment variables (``var.NAME``);
* the text of files that variables name (``file.NAME`` is the file whose path is in ``$NAME``,
  e.g. LSF's ``LSB_DJOB_RANKFILE``).

Tests, golden files and ``resolver explain --simulate`` build one directly; :meth:`Environment.probe`
reads the real machine and keeps every variable and file the rule table reads.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from resolver._domain.config import FrozenMapping, Provenance
from resolver._engine.errors import ResolutionError
from resolver._engine.slot_types import ENV_PREFIX as _FACT_PREFIX
from resolver._engine.slot_types import FILE_PREFIX as _FILE_PREFIX
from resolver._snapshot.probes import PROBES, probes, read_facts, register_probe

if TYPE_CHECKING:
    from resolver._engine.compiled import CompiledTable

__all__ = ["Environment", "RELEVANT_VARIABLE_PREFIXES", "RELEVANT_VARIABLES", "register_probe"]

#: Variables every probed snapshot keeps (exact names), besides those with a relevant prefix and
#: those the loaded rule table reads.
RELEVANT_VARIABLES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "ROLE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "CUDA_VISIBLE_DEVICES",
        "PMI_SIZE",
        "PMI_RANK",
        "PJRT_DEVICE",
        "TPU_NUM_DEVICES",
    }
)
RELEVANT_VARIABLE_PREFIXES = ("SLURM_", "LSB_", "JSM_", "OMPI_", "KUBERNETES_", "RESOLVER_", "HOROVOD_", "XRT_")
#: A file a variable names is read into the snapshot up to this size.
MAX_FILE_BYTES = 1 << 20


def _text_mapping(value: Mapping[str, Any] | None, what: str) -> FrozenMapping:
    if value is not None and not isinstance(value, Mapping):
        raise ResolutionError(f"Environment {what} must be a table of NAME = text, got {value!r}")
    return FrozenMapping({str(k): str(v) for k, v in (value or {}).items()})


class Environment:
    """What resolution may know about the machine and the cluster (frozen, hashable).

    ``Environment(cuda_device_count=8, hostname="gpu01", variables={"SLURM_NTASKS": "8"})``: keyword
    arguments other than ``variables`` and ``files`` are machine facts, one per registered probe;
    a fact not given has its probe's default. Facts read as attributes (``env.cuda_device_count``).
    """

    __slots__ = ("facts", "variables", "files", "_hash", "_inputs")
    facts: FrozenMapping
    variables: FrozenMapping
    files: FrozenMapping

    def __init__(
        self,
        *,
        variables: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        **facts: Any,
    ) -> None:
        known = probes()  # the installed plugins' probes included
        unknown = sorted(set(facts) - known.keys())
        if unknown:
            raise ResolutionError(
                f"unknown environment field(s) {', '.join(unknown)}; known fields are "
                f"{', '.join(sorted([*known, 'files', 'variables']))}",
                hint="a new machine fact needs a probe: resolver.register_probe(NAME, default=...)",
            )
        checked = {}
        for name, probe in known.items():
            try:
                checked[name] = probe.check(facts[name]) if name in facts else probe.default
            except ValueError as exc:
                raise ResolutionError(str(exc)) from None
        object.__setattr__(self, "facts", FrozenMapping(checked))
        object.__setattr__(self, "variables", _text_mapping(variables, "variables"))
        object.__setattr__(self, "files", _text_mapping(files, "files"))
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_inputs", None)  # (template, values): Environment.input_values

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            facts = object.__getattribute__(self, "facts")
            if name in facts:
                return facts[name]
            if name in PROBES:
                return PROBES[name].default
        raise AttributeError(f"Environment has no fact {name!r}; facts: {', '.join(sorted(PROBES))}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Environment is frozen; use .replace(...) for a changed copy")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Environment):
            return NotImplemented
        return (self.facts, self.variables, self.files) == (other.facts, other.variables, other.files)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self.facts, self.variables, self.files)))
        return self._hash  # type: ignore[return-value]

    def __repr__(self) -> str:
        given = [f"{k}={v!r}" for k, v in self.facts.items() if v != PROBES[k].default] if self.facts else []
        if self.variables:
            given.append(f"variables={dict(self.variables)!r}")
        if self.files:
            given.append(f"files={sorted(self.files)!r}")
        return f"Environment({', '.join(given)})"

    def __reduce__(self) -> Any:
        return (_rebuild, (dict(self.facts), dict(self.variables), dict(self.files)))

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "environment") -> Environment:
        """Build from plain data (the TOML environment file's shape); unknown keys are errors."""
        try:
            return cls(**dict(data))
        except ResolutionError as exc:
            raise ResolutionError(f"{source}: {exc.message}", hint=exc.hint) from None
        except TypeError as exc:
            raise ResolutionError(f"{source}: {exc}") from exc

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> Environment:
        """Load a snapshot from a TOML file: facts as keys, ``[variables]`` and ``[files]`` tables.

        A top-level ``[environment]`` table is accepted too, so a golden scenario file can be
        used as an environment file.
        """
        import tomllib
        from pathlib import Path

        from resolver._engine.input_files import loads_toml, read_text

        p = Path(path)
        try:
            data = loads_toml(read_text(str(p), "environment file"), str(p), "environment file")
        except OSError as exc:
            raise ResolutionError(f"cannot read environment file {p}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ResolutionError(f"{p}: not UTF-8 text ({exc.reason}); save it as UTF-8") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ResolutionError(f"{p}: malformed TOML: {exc}") from exc
        if "environment" in data and isinstance(data["environment"], dict):
            data = data["environment"]
        return cls.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = dict(self.facts)
        data["variables"] = dict(self.variables)
        data["files"] = dict(self.files)  # always there, empty or not: `explain --format json` documents the key
        return data

    def replace(
        self,
        *,
        variables: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        **facts: Any,
    ) -> Environment:
        """A copy with some facts, the variables or the files replaced."""
        return Environment(
            variables=self.variables if variables is None else variables,
            files=self.files if files is None else files,
            **{**self.facts, **facts},
        )

    # -- what the rules read ----------------------------------------------------------------------

    def inputs(self, table: CompiledTable) -> tuple[dict[str, Any], dict[str, Provenance]]:
        """The ``env.*``, ``file.*`` and ``var.*`` slot values the table reads, with provenance."""
        plan = InputPlan(table)
        values = plan.values(self, {})
        return values, {slot: plan.provenance(self, slot) for slot in values}  # type: ignore[misc]

    def input_values(self, plan: InputPlan, template: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``template`` (which holds every slot ``plan`` names, in order) with this
        snapshot's inputs written in, for the caller to change. From a snapshot's second use with
        the same template they are kept (snapshots are frozen) and copied: a snapshot used once
        (a sweep's, a worker's) costs one copy, one used again one copy too."""
        kept = self._inputs
        if kept is None or kept[0] is not template:
            object.__setattr__(self, "_inputs", (template, None))
            return plan.values(self, template)
        if kept[1] is None:
            object.__setattr__(self, "_inputs", (template, plan.values(self, template)))
        return dict(self._inputs[1])

    # -- probing the real machine ---------------------------------------------------------------
    # -- probing the real machine ---------------------------------------------------------------

    @classmethod
    def probe(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        table: CompiledTable | None = None,
        refresh: bool = False,
    ) -> Environment:
        """Read the real machine, cheaply.

        Every registered probe reads its fact (GPUs are counted from the NVIDIA driver's files,
        respecting ``CUDA_VISIBLE_DEVICES``; package availability uses ``importlib.util.find_spec``,
        no import). The snapshot keeps the variables ``table`` reads (default: the built-in table
        with the site rules ``RESOLVER_RULES`` names)
        plus the built-in relevant ones, and the text of each file a ``file.NAME`` slot names.

        Facts that cannot change within a process (which packages are importable, the driver's
        GPUs, ``per_process`` probes) are read at the first probe and kept; variables, files and the
        other facts are read on every call. ``refresh=True`` reads the kept facts again (after
        installing a package into the running process, say).
        """
        if table is None:  # the table resolve() uses when given no rules
            from resolver._domain.rule_tables import rule_files_in_use, table_in_use

            table = table_in_use(rule_files_in_use())
        env = os.environ if environ is None else environ
        read = _variables_read(table)
        # Only the names are looked at first: os.environ decodes a value when it is read.
        variables = {k: env[k] for k in env if k in read or k.startswith(RELEVANT_VARIABLE_PREFIXES)}
        files = {}
        for name in _files_read(table):
            path = env.get(name)
            if path:
                variables[name] = path
                text = _read_named_file(path)
                if text is not None:
                    files[name] = text
        facts = read_facts(env, refresh=refresh)
        # The same machine probed again gives the same snapshot object, whose inputs are kept
        # (Environment.input_values): equal facts, variables and files, so nothing is left unread.
        last = _LAST_PROBE.get(id(table))
        if (
            last is not None
            and last[0] is table
            and last[1].facts._data == facts
            and last[1].variables._data == variables
            and last[1].files._data == files
        ):
            return last[1]
        made = cls(variables=variables, files=files, **facts)
        if len(_LAST_PROBE) > 8:
            _LAST_PROBE.clear()
        _LAST_PROBE[id(table)] = (table, made)
        return made


#: The last snapshot probed for each table (by id, the table kept beside it): see Environment.probe.
_LAST_PROBE: dict[int, tuple[CompiledTable, Environment]] = {}


def _variables_read(table: CompiledTable) -> frozenset[str]:
    """The variables a probe keeps for ``table``: those it reads and the relevant ones (kept per table)."""
    found = _READ.get(id(table))
    if found is None or found[0] is not table:
        names = frozenset(table.variables.values()) | RELEVANT_VARIABLES
        files = tuple(slot.removeprefix(_FILE_PREFIX) for slot in table.slots if slot.startswith(_FILE_PREFIX))
        if len(_READ) > 8:
            _READ.clear()
        found = _READ[id(table)] = (table, names, files)
    return found[1]


def _files_read(table: CompiledTable) -> tuple[str, ...]:
    """The variables naming a file whose text ``table`` reads (``file.NAME`` slots)."""
    _variables_read(table)
    return _READ[id(table)][2]


_READ: dict[int, tuple[CompiledTable, frozenset[str], tuple[str, ...]]] = {}


class InputPlan:
    """Which ``env.*``, ``file.*`` and ``var.*`` slots a table reads, and from where: made once per
    table, so a snapshot's inputs are a few lookups, and their provenance is made only when read."""

    __slots__ = (
        "slots",
        "_facts",
        "_fact_slots",
        "_read_facts",
        "_files",
        "_variables",
        "_var_slots",
        "_slot_of_variable",
    )

    def __init__(self, table: CompiledTable) -> None:
        input_stage = table.stages[0].name if table.stages else None
        facts: dict[str, str] = {}
        files: dict[str, str] = {}
        for slot_name, slot in table.slots.items():
            if slot.stage != input_stage:
                continue
            if slot_name.startswith(_FACT_PREFIX):
                facts[slot_name] = slot_name.removeprefix(_FACT_PREFIX)
            elif slot_name.startswith(_FILE_PREFIX):
                files[slot_name] = slot_name.removeprefix(_FILE_PREFIX)
        self._facts, self._files, self._variables = facts, files, dict(table.variables)
        self._fact_slots, names = tuple(facts), tuple(facts.values())
        #: The facts in ``_fact_slots``' order, read in one call (an itemgetter of one name gives no tuple).
        self._read_facts: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            operator.itemgetter(*names) if len(names) > 1 else lambda data: tuple(data[name] for name in names)
        )
        self._var_slots = tuple(self._variables)
        self._slot_of_variable = {name: slot for slot, name in self._variables.items()}
        #: Every slot a snapshot fills, in the order ``Environment.inputs`` has always given them
        #: (facts and files in the table's order, then variables): the provenance's order.
        self.slots: tuple[str, ...] = tuple(s for s in table.slots if s in facts or s in files) + self._var_slots

    def values(self, environment: Environment, template: Mapping[str, Any]) -> dict[str, Any]:
        """``template`` copied, with the snapshot's inputs written in. ``template`` is empty (every input
        is added, in order) or holds every slot of this plan, unset ones as None."""
        values = dict(template)
        facts = environment.facts._data
        try:
            values.update(zip(self._fact_slots, self._read_facts(facts), strict=False))  # one length by construction
        except KeyError:
            missing = next(slot for slot, name in self._facts.items() if name not in facts)
            name = self._facts[missing]
            raise ResolutionError(
                f"the rule table reads {missing!r}, a machine fact no probe provides",
                hint=f"register a probe before resolving: resolver.register_probe({name!r}, default=...)",
            ) from None
        files = environment.files._data
        # a template holds every file slot unset already: only a snapshot with files writes them
        if self._files and (files or not template):
            text = files.get
            values.update((slot, text(name)) for slot, name in self._files.items())
        if not template:  # keep the provenance's order: facts and files as the table has them
            values = {slot: values.get(slot) for slot in self.slots}
        # The template holds every var.* slot unset: only the variables the snapshot has are written
        # (a snapshot holds a few; the table reads dozens).
        slot_of = self._slot_of_variable
        for name, value in environment.variables._data.items():
            slot = slot_of.get(name)
            if slot is not None:
                values[slot] = value
        return values

    def present(self, environment: Environment) -> list[str]:
        """The ``var.*`` and ``file.*`` slots the snapshot sets (a few: the table reads dozens)."""
        slot_of = self._slot_of_variable
        found = [slot_of[name] for name in environment.variables._data if name in slot_of]
        if self._files and environment.files._data:
            found.extend(slot for slot, name in self._files.items() if name in environment.files._data)
        return found

    def provenance(self, environment: Environment, slot: str) -> Provenance | None:
        """Where the snapshot's input ``slot`` came from; None for a slot no snapshot fills."""
        name = self._variables.get(slot)
        if name is not None:
            value = environment.variables.get(name)
            return Provenance("variable", f"{name}={value}" if value is not None else f"{name} (unset)")
        name = self._facts.get(slot)
        if name is not None:
            return Provenance("environment", f"{name}={environment.facts[name]!r}")
        name = self._files.get(slot)
        if name is not None:
            path = environment.variables.get(name, "?")
            return Provenance(
                "environment",
                f"file {path} (named by {name})" if name in environment.files else f"{name} file (unread)",
            )
        return None


def _rebuild(facts: dict[str, Any], variables: dict[str, str], files: dict[str, str]) -> Environment:
    return Environment(variables=variables, files=files, **{k: v for k, v in facts.items() if k in probes()})


def _read_named_file(path: str) -> str | None:
    """A file's text, or None when it cannot be read (the rules then see it unset)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_FILE_BYTES)
    except OSError:
        return None
