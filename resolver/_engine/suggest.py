"""The one "did you mean" helper: the closest known names to a misspelt one (difflib).

Every place that refuses a name it does not know (a flag value, a CLI option, a slot or key in a
rule file, a ``--simulate`` token, a key of a flags file) words its suggestion through here, so
they all suggest alike.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest", "did_you_mean", "wording"]

#: How alike two names must be (difflib's ratio) to be suggested; 0.6 is difflib's own default.
_CUTOFF = 0.6


def closest(name: str, known: Iterable[str], *, limit: int = 3) -> list[str]:
    """Up to ``limit`` known names closest to ``name``, best first; case is ignored when comparing.

    Dotted names (``arg.stratgy``) are also compared by their last part, so a typo in a rule
    file's ``"arg.stratgy"`` finds ``arg.strategy`` even among hundreds of slots.
    """
    import difflib  # only when a name is unknown: nothing pays for it on the way to a resolution

    names = list(dict.fromkeys(str(k) for k in known))
    if not names or not name:
        return []
    by_lower: dict[str, str] = {}
    for known_name in names:
        by_lower.setdefault(known_name.lower(), known_name)
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=limit, cutoff=_CUTOFF)
    if len(found) < limit and "." in name:
        tail = name.rsplit(".", 1)[-1].lower()
        tails: dict[str, list[str]] = {}
        for lowered in by_lower:
            tails.setdefault(lowered.rsplit(".", 1)[-1], []).append(lowered)
        for match in difflib.get_close_matches(tail, list(tails), n=limit, cutoff=_CUTOFF):
            found += [full for full in tails[match] if full not in found]
    return [by_lower[lowered] for lowered in found[:limit]]


def did_you_mean(name: str, known: Iterable[str], *, limit: int = 3, quote: bool = True, prefix: str = "") -> str:
    """``"did you mean 'ddp'?"`` (or ``'ddp' or 'dp'``), or ``""`` when nothing is close.

    ``prefix`` is written before each name shown (``--`` for options compared without their dashes).
    """
    return wording([prefix + f for f in closest(name, known, limit=limit)], quote=quote)


def wording(names: list[str], *, quote: bool = True) -> str:
    """``"did you mean 'a', 'b' or 'c'?"`` for names already found, or ``""`` for none."""
    if not names:
        return ""
    shown = [repr(n) if quote else n for n in names]
    listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    return f"did you mean {listed}?"
