"""The frozen result of resolution, and where each of its values came from."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver._engine.values import FrozenMapping, Provenance, ProvenanceView, display, fields_repr

if TYPE_CHECKING:
    import cattrs

__all__ = [
    "DECIDED_FIELDS",
    "FrozenMapping",
    "Provenance",
    "ProvenanceView",
    "ResolvedConfig",
    "display",
    "get_converter",
]


def _to_frozen_mapping(value: Mapping[str, Any] | None) -> FrozenMapping:
    return value if type(value) is FrozenMapping or isinstance(value, FrozenMapping) else FrozenMapping(value)


def _to_flags(value: Mapping[str, Any] | None) -> FrozenMapping:
    """Flags as ``resolve()`` normalized them: lists (from JSON) as tuples."""
    if type(value) is FrozenMapping:
        for item in value._data.values():
            if isinstance(item, list):
                break
        else:
            return value  # already as resolve() makes it
    items = (value or {}).items()
    return FrozenMapping({k: tuple(v) if isinstance(v, list) else v for k, v in items})


def _to_provenance_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if type(value) is ProvenanceView or isinstance(value, FrozenMapping | ProvenanceView):
        return value
    return FrozenMapping(value)


def _to_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return items if type(items) is tuple else tuple(items)


#: Not slotted: every ``resolve()`` builds one, and attrs fills an instance dict faster than it
#: sets twenty slots one call at a time (``tests/benchmarks/compare_lightning.py``).
@attrs.frozen(slots=False)
class ResolvedConfig:
    """Everything the runtime needs to build a strategy, decided and frozen.

    Field names and values are the public vocabulary: each field is a slot the rules declare, with
    its type, domain and meaning (``rules/vocabulary.toml``; the rendezvous in
    ``rules/rendezvous.toml``), and ``docs/usage.md`` ("The result") lists them.
    ``provenance`` maps each field to the :class:`Provenance` of its value; ``notes`` holds the
    explained choices made on the user's behalf (e.g. one GPU in a notebook).
    """

    accelerator: str
    num_devices: int
    device_ids: tuple[int, ...] = attrs.field(converter=_to_tuple)
    num_nodes: int
    strategy: str
    launcher: str | None
    collective: str
    process_group_backend: str | None
    cluster_environment: str
    precision: str
    world_size: int
    global_rank: int
    local_rank: int
    node_rank: int
    #: Intra-op CPU threads each local rank runs torch with (``OMP_NUM_THREADS``); ``None``: torch's default.
    threads_per_rank: int | None = None
    #: Rank 0's machine and rendezvous port (``MASTER_ADDR``/``MASTER_PORT``); ``main_port`` is
    #: None when the runtime picks a free port at launch (one machine), and both are None where the
    #: cluster's own runtime connects the processes (XLA).
    main_address: str | None = None
    main_port: int | None = None
    strategy_options: FrozenMapping = attrs.field(factory=FrozenMapping, converter=_to_frozen_mapping)
    #: The flags ``resolve()`` was given (normalized; those left at their default are left out), so
    #: a worker can tell whether the ``launch()`` it reaches is the one it was started for
    #: without resolving again.
    flags: FrozenMapping = attrs.field(factory=FrozenMapping, converter=_to_flags)
    provenance: Mapping[str, Provenance] = attrs.field(
        factory=FrozenMapping, converter=_to_provenance_mapping, eq=False, repr=False
    )
    notes: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)

    __repr__ = fields_repr

    def to_dict(self, *, with_provenance: bool = True) -> dict[str, Any]:
        """Plain data (JSON/TOML-ready)."""
        data: dict[str, Any] = get_converter().unstructure(self)
        if not with_provenance:
            data.pop("provenance", None)
        return data

    def to_json(self, *, with_provenance: bool = True) -> str:
        import json

        return json.dumps(self.to_dict(with_provenance=with_provenance), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResolvedConfig:
        """The config :meth:`to_dict` wrote (keys it does not know are ignored).

        Decoded without cattrs: a rank a launcher starts decodes its config from ``RESOLVER_CONFIG``
        this way and imports no cattrs; the fields' converters turn JSON's lists back into tuples
        and mappings.
        """
        known = _FIELD_NAMES
        fields = {name: value for name, value in data.items() if name in known and name != "provenance"}
        provenance = {name: _provenance_from_data(item) for name, item in (data.get("provenance") or {}).items()}
        return cls(**fields, provenance=provenance)

    @classmethod
    def from_json(cls, text: str) -> ResolvedConfig:
        import json

        return cls.from_dict(json.loads(text))

    def summary(self) -> str:
        """The one-line form ``resolver run`` prints."""
        parts = [
            f"accelerator={self.accelerator}",
            f"devices={list(self.device_ids)}",
            f"num_nodes={self.num_nodes}",
            f"strategy={self.strategy}",
            f"launcher={self.launcher}",
            f"precision={self.precision}",
            f"cluster={self.cluster_environment}",
            f"world_size={self.world_size}",
        ]
        return " ".join(parts)


_FIELD_NAMES = frozenset(a.name for a in attrs.fields(ResolvedConfig))


def _provenance_data(provenance: Provenance) -> dict[str, Any]:
    """A :class:`Provenance` as plain data (what :func:`_provenance_from_data` reads back)."""
    return {
        "kind": provenance.kind,
        "source": provenance.source,
        "rule": provenance.rule,
        "why": provenance.why,
        "inputs": [[k, list(v) if isinstance(v, tuple) else v] for k, v in provenance.inputs],
    }


def _provenance_from_data(data: Mapping[str, Any]) -> Provenance:
    return Provenance(
        kind=data["kind"],
        source=data.get("source"),
        rule=data.get("rule"),
        why=data.get("why"),
        inputs=tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in data.get("inputs", ())),
    )


#: The fields the rules decide, each with its provenance (not ``flags``, ``provenance``, ``notes``).
DECIDED_FIELDS: tuple[str, ...] = tuple(
    a.name for a in attrs.fields(ResolvedConfig) if a.name not in ("provenance", "notes", "flags")
)


@functools.cache
def get_converter() -> cattrs.Converter:
    """The cattrs converter that writes configs and provenance as plain data (imports cattrs on first
    use); :meth:`ResolvedConfig.from_dict` reads them back."""
    import cattrs

    conv = cattrs.Converter()
    conv.register_unstructure_hook(FrozenMapping, lambda m: {k: conv.unstructure(v) for k, v in m.items()})
    conv.register_unstructure_hook(ProvenanceView, lambda m: {k: conv.unstructure(v, Provenance) for k, v in m.items()})
    conv.register_unstructure_hook(Provenance, _provenance_data)
    is_provenance_map: Callable[[Any], bool] = lambda t: t == Mapping[str, Provenance]  # noqa: E731
    conv.register_unstructure_hook_func(is_provenance_map, lambda m: {k: _provenance_data(v) for k, v in m.items()})
    return conv
