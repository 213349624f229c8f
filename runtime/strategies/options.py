"""Strategy options: each strategy declares them once, as an attrs class, and cattrs structures them.

``config.strategy_options`` (from rules, ``runtime.build(config, **options)`` or
``runtime.launch(..., strategy_options=...)``) is structured into the strategy's ``Options``
class when the strategy is built: unknown keys and wrong types are reported here, in one place,
with the options the strategy takes. Option values must be plain data (JSON): the ranks a
launcher starts receive them inside the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from runtime.errors import RuntimeConfigError
from runtime.launchers.rank_output import RankOutput

__all__ = ["StrategyOptions", "structure_options"]


@attrs.frozen(kw_only=True)
class StrategyOptions:
    """The options every strategy takes.

    - ``use_distributed_sampler``: :meth:`~runtime.Strategy.process_dataloader` shards loaders
      across ranks (``False`` leaves loaders alone).
    - ``timeout`` (seconds): bounds a launched run and every collective operation.
    - ``check_collectives``: ranks compare their arguments before each collective operation, so
      misuse raises on every rank instead of hanging (``False`` saves that small exchange).
    - ``rank_output``: the output of the rank processes the ``subprocess``, ``spawn`` and
      ``fork`` launchers start, as whole lines prefixed ``[rank N]: ``: ``True``, or a table of
      :class:`~runtime.launchers.rank_output.RankOutput` fields (``{"log_dir": "logs"}``);
      ``None`` (default) leaves their output as it is.
    """

    use_distributed_sampler: bool = True
    timeout: float | None = None
    check_collectives: bool = True
    rank_output: RankOutput | None = None


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


_converter = cattrs.Converter(forbid_extra_keys=True)
_converter.register_structure_hook(bool, _strict_bool)
_converter.register_structure_hook(float, _number)
_converter.register_structure_hook(int, _integer)
_converter.register_structure_hook(str, _text)


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
    return _converter.structure(dict(value), RankOutput)


_converter.register_structure_hook_func(lambda t: t == RankOutput | None, _rank_output)


def _describe(exc: BaseException, expected: type | None) -> str:
    if isinstance(exc, KeyError):
        return "required"
    message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)  # attrs adds the field
    return message if expected is None else f"{message} (expected {getattr(expected, '__name__', expected)})"


def structure_options(strategy: str, options_class: type[StrategyOptions], options: Mapping[str, Any]) -> Any:
    """``options`` as an instance of ``options_class``, or a :class:`RuntimeConfigError` saying
    which option is unknown or has the wrong type, and what the strategy takes."""
    try:
        return _converter.structure(dict(options), options_class)
    except ClassValidationError as exc:
        accepted = ", ".join(sorted(attrs.fields_dict(options_class))) or "no options"
        unknown = [key for error in exc.exceptions if isinstance(error, ForbiddenExtraKeysError)
                   for key in sorted(error.extra_fields)]  # fmt: skip
        if unknown:
            raise RuntimeConfigError(
                f"strategy {strategy!r} got unknown option(s) {', '.join(map(repr, unknown))}; it takes {accepted}"
            ) from None
        problems = "; ".join(cattrs.transform_error(exc, path="strategy_options", format_exception=_describe))
        raise RuntimeConfigError(
            f"strategy {strategy!r} got an invalid option: {problems}\n  hint: it takes {accepted}"
        ) from None
    except (TypeError, ValueError) as exc:
        raise RuntimeConfigError(f"strategy {strategy!r} got an invalid option: {exc}") from None
