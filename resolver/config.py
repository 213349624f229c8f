"""The frozen result of resolution, and where each of its values came from."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver.values import FrozenMapping, Provenance, ProvenanceView, display, fields_repr

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
        return get_converter().structure(dict(data), cls)

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


#: The fields the rules decide, each with its provenance (not ``flags``, ``provenance``, ``notes``).
DECIDED_FIELDS: tuple[str, ...] = tuple(
    a.name for a in attrs.fields(ResolvedConfig) if a.name not in ("provenance", "notes", "flags")
)


@functools.cache
def get_converter() -> cattrs.Converter:
    """The cattrs converter for configs and provenance (imports cattrs on first use)."""
    import cattrs

    conv = cattrs.Converter()
    conv.register_unstructure_hook(FrozenMapping, lambda m: {k: conv.unstructure(v) for k, v in m.items()})
    conv.register_unstructure_hook(ProvenanceView, lambda m: {k: conv.unstructure(v, Provenance) for k, v in m.items()})
    conv.register_structure_hook(FrozenMapping, lambda d, _: FrozenMapping(d))

    def _inputs_to_data(inputs: tuple[tuple[str, Any], ...]) -> list[list[Any]]:
        return [[k, list(v) if isinstance(v, tuple) else v] for k, v in inputs]

    conv.register_unstructure_hook(
        Provenance,
        lambda p: {
            "kind": p.kind,
            "source": p.source,
            "rule": p.rule,
            "why": p.why,
            "inputs": _inputs_to_data(p.inputs),
        },
    )
    conv.register_structure_hook(
        Provenance,
        lambda d, _: Provenance(
            kind=d["kind"],
            source=d.get("source"),
            rule=d.get("rule"),
            why=d.get("why"),
            inputs=tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in d.get("inputs", ())),
        ),
    )

    def _structure_provenance_map(d: Mapping[str, Any], _: Any) -> FrozenMapping:
        return FrozenMapping({k: conv.structure(v, Provenance) for k, v in d.items()})

    is_provenance_map: Callable[[Any], bool] = lambda t: t == Mapping[str, Provenance]  # noqa: E731
    conv.register_structure_hook_func(is_provenance_map, _structure_provenance_map)
    conv.register_unstructure_hook_func(
        is_provenance_map, lambda m: {k: conv.unstructure(v, Provenance) for k, v in m.items()}
    )
    return conv
