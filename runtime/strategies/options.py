"""Strategy options: each strategy declares them once, as an attrs class, and cattrs structures them.

``config.strategy_options`` (from rules, ``runtime.build(config, **options)`` or
``runtime.launch(..., strategy_options=...)``) is structured into the strategy's ``Options``
class when the strategy is built: unknown keys and wrong types are reported here, in one place,
with the options the strategy takes. Option values must be plain data (JSON): the ranks a
launcher starts receive them inside the config.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import NoneType
from typing import TYPE_CHECKING, Any

import attrs

from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime._supervision.progress_watchdog import DEFAULT_PROGRESS_TIMEOUT, check_progress_timeout
from runtime.errors import RuntimeConfigError
from runtime.launchers.rank_output import RankOutput

if TYPE_CHECKING:
    import cattrs

__all__ = ["StrategyOptions", "structure_options"]


@attrs.frozen(kw_only=True)
class StrategyOptions:
    """The options every strategy takes.

    - ``use_distributed_sampler``: :meth:`~runtime.Strategy.process_dataloader` shards loaders
      across ranks (``False`` leaves loaders alone).
    - ``timeout`` (seconds): bounds a launched run and every collective operation.
    - ``rendezvous_timeout`` (seconds): bounds the time until every rank has joined the process
      group (default: ``RUNTIME_RENDEZVOUS_TIMEOUT``, else 300); separate from ``timeout``.
    - ``progress_timeout`` (seconds, default 60): the progress watchdog stops a launch, as at its
      ``timeout``, when no rank has made progress (an optimizer step, a collective,
      :meth:`~runtime.Strategy.heartbeat`) for the larger of this and 10x the median step time,
      once a rank made its first step (:mod:`runtime._supervision.progress_watchdog`); 0 turns it off.
    - ``check_collectives``: ranks compare their arguments before each collective operation, so
      misuse raises on every rank instead of hanging (``False`` saves that small exchange).
    - ``num_threads``: intra-op CPU threads of each rank, instead of the resolved
      ``threads_per_rank`` (``OMP_NUM_THREADS``, else cores // local ranks).
    - ``rank_output``: the output of the rank processes the ``subprocess``, ``spawn`` and
      ``fork`` launchers start, as whole lines prefixed ``[rank N]: ``: ``True``, or a table of
      :class:`~runtime.launchers.rank_output.RankOutput` fields (``{"log_dir": "logs"}``);
      ``None`` (default) leaves their output as it is.
    - ``max_restarts``: after a rank fails, stop the others and start every local rank again, at
      most this many times (torchrun's ``--max-restarts``; see :mod:`runtime._protocol.restarts`).
      Only where this launch starts the processes, on one node; 0 (default) never restarts.
    - ``preemption_signal``: the signal that announces pre-emption (``"SIGUSR1"``, SLURM's
      ``--signal`` convention; ranks SLURM started take ``SIGTERM`` too); ranks then agree on it
      in :meth:`~runtime.Strategy.preempted` (see :mod:`runtime.preemption`). ``None`` (default): off.
    - ``requeue``: after a pre-emption in a SLURM job, rank 0 requeues the job (``scontrol requeue``).
    """

    use_distributed_sampler: bool = True
    timeout: float | None = attrs.field(default=None)
    rendezvous_timeout: float | None = attrs.field(default=None)

    @timeout.validator
    @rendezvous_timeout.validator
    def _check_timeout(self, attribute: attrs.Attribute[float | None], value: float | None) -> None:
        if value is not None:
            check_timeout(value, f"{attribute.name}={value!r}", TIMEOUT_HINTS[attribute.name])

    progress_timeout: float = attrs.field(default=DEFAULT_PROGRESS_TIMEOUT)

    @progress_timeout.validator
    def _check_progress_timeout(self, attribute: attrs.Attribute[float], value: float) -> None:
        check_progress_timeout(value, f"progress_timeout={value!r}")

    check_collectives: bool = True
    num_threads: int | None = attrs.field(default=None)

    @num_threads.validator
    def _check_num_threads(self, attribute: attrs.Attribute[int | None], value: int | None) -> None:
        if value is not None and value < 1:
            raise ValueError(f"num_threads must be at least 1, got {value}")

    rank_output: RankOutput | None = None
    max_restarts: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    preemption_signal: str | None = attrs.field(default=None)

    @preemption_signal.validator
    def _check_preemption_signal(self, attribute: attrs.Attribute[str | None], value: str | None) -> None:
        if value is not None:
            from runtime.preemption import check_preemption_signal

            check_preemption_signal(value)

    requeue: bool = attrs.field(default=False)

    @requeue.validator
    def _check_requeue(self, attribute: attrs.Attribute[bool], value: bool) -> None:
        if value and self.preemption_signal is None:
            raise ValueError(
                "requeue=True requeues a pre-empted SLURM job, but no preemption_signal is set; "
                "set preemption_signal='SIGUSR1' (resolver run --preemption-signal SIGUSR1) too"
            )


def _strict_bool(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _number(value: object, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _integer(value: object, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _text(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


@functools.cache
def _converter() -> cattrs.Converter:
    import cattrs  # only for options that are not plain values of their declared types

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(float, _number)
    converter.register_structure_hook(int, _integer)
    converter.register_structure_hook(str, _text)
    converter.register_structure_hook_func(lambda t: t == RankOutput | None, _rank_output)
    return converter


#: Declared option types whose values a rank usually receives as they are: the value types each takes.
_PLAIN: dict[Any, tuple[type, ...]] = {
    bool: (bool,), int: (int,), float: (int, float), str: (str,),
    bool | None: (bool, NoneType), int | None: (int, NoneType), float | None: (int, float, NoneType),
    str | None: (str, NoneType),
}  # fmt: skip


def _plain(options_class: type[StrategyOptions], options: Mapping[str, Any]) -> Any:
    """``options_class(**options)`` when every option is a plain value of its declared type
    (the common case, without importing cattrs), else ``None``."""
    fields = attrs.fields_dict(attrs.resolve_types(options_class))
    values: dict[str, Any] = {}
    for key, value in options.items():
        field = fields.get(key)
        accepted = _PLAIN.get(field.type) if field is not None else None
        if accepted is None or type(value) not in accepted:
            return None
        values[key] = float(value) if type(value) is int and float in accepted else value
    try:
        return options_class(**values)
    except RuntimeConfigError:
        raise  # a value of the right type out of its range: the option's own message
    except (TypeError, ValueError):
        return None  # cattrs says what is wrong, in the usual words


def _rank_output(value: object, _: type) -> RankOutput | None:
    if value is None or value is False:
        return None
    if value is True:
        return RankOutput()
    fields = sorted(attrs.fields_dict(RankOutput))
    if not isinstance(value, Mapping):
        raise TypeError(f"expected true, false or a table with keys among {', '.join(fields)}; got {value!r}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise TypeError(f"unknown key(s) {', '.join(map(repr, unknown))}; it takes {', '.join(fields)}")
    ranks = value.get("local_ranks_filter")
    if ranks is not None and not isinstance(ranks, list | tuple):
        raise TypeError(f"local_ranks_filter must be a list of local ranks, like [0, 3]; got {ranks!r}")
    return _converter().structure(dict(value), RankOutput)


def _describe(exc: BaseException, expected: type | None) -> str:
    if isinstance(exc, KeyError):
        return "required"
    message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)  # attrs adds the field
    return message if expected is None else f"{message} (expected {getattr(expected, '__name__', expected)})"


def structure_options(strategy: str, options_class: type[StrategyOptions], options: Mapping[str, Any]) -> Any:
    """``options`` as an instance of ``options_class``, or a :class:`RuntimeConfigError` saying
    which option is unknown or has the wrong type, and what the strategy takes."""
    try:
        found = _plain(options_class, options)
    except RuntimeConfigError as exc:
        raise RuntimeConfigError(f"strategy {strategy!r} got an invalid option: {exc}") from None
    if found is not None:
        return found
    import cattrs
    from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

    try:
        return _converter().structure(dict(options), options_class)
    except ClassValidationError as exc:
        own = next((error for error in exc.exceptions if isinstance(error, RuntimeConfigError)), None)
        if own is not None:  # a value of the right type out of its range: the option's own message
            raise RuntimeConfigError(f"strategy {strategy!r} got an invalid option: {own}") from None
        accepted = ", ".join(sorted(attrs.fields_dict(options_class))) or "no options"
        unknown = [key for error in exc.exceptions if isinstance(error, ForbiddenExtraKeysError)
                   for key in sorted(error.extra_fields)]  # fmt: skip
        if unknown:
            raise RuntimeConfigError(
                f"strategy {strategy!r} got unknown option(s) {', '.join(map(repr, unknown))}; it takes {accepted}"
            ) from None
        problems = "; ".join(cattrs.transform_error(exc, path="strategy_options", format_exception=_describe))
        raise RuntimeConfigError(
            f"strategy {strategy!r} got an invalid option: {problems}", hint=f"it takes {accepted}"
        ) from None
    except (TypeError, ValueError) as exc:
        raise RuntimeConfigError(f"strategy {strategy!r} got an invalid option: {exc}") from None
