"""The result of ``resolver check``: one line per check, with blame and fix for a failure.

Each rank records :class:`Check` entries as it goes; the process that reports (the local launcher,
or rank 0 inside a job someone else started) merges them, with what it saw of each rank process
(exited, killed at the timeout), into one :class:`CheckReport`. Everything is plain data, so a
rank can write it as JSON and ``--format json`` prints it as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["STEPS", "WARN", "Check", "CheckReport", "RankState", "merge"]

#: The checks, in the order they run; a report lists them in this order.
STEPS = (
    "rendezvous",
    "agreement",
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "ring",
    "speed",
    "engine",
)

OK, FAIL, SKIP = "ok", "fail", "skip"
#: Passed, with a finding that stands out (a slow link): the job would run, slower; exit status 0.
WARN = "warn"


# Typed converters: with a bare ``tuple`` converter, type checkers cannot tell what a field accepts.
def _ranks(ranks: Iterable[int]) -> tuple[int, ...]:
    return tuple(ranks)


def _hosts(hosts: Iterable[str]) -> tuple[str, ...]:
    return tuple(hosts)


def _figures(figures: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(figures)


@attrs.frozen
class Check:
    """One check's outcome as one rank saw it (or, merged, as the run saw it).

    ``blame`` names the ranks at fault (with ``hosts``), ``fix`` what to do; ``echo`` marks a
    failure that only follows from another rank's (a peer that timed out waiting for the culprit),
    which the merged report leaves out when the culprit's own entry is there.
    """

    name: str
    status: str
    detail: str = ""
    blame: tuple[int, ...] = attrs.field(default=(), converter=_ranks)
    hosts: tuple[str, ...] = attrs.field(default=(), converter=_hosts)
    fix: str = ""
    echo: bool = False
    seconds: float = 0.0
    figures: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_figures)
    table: tuple[tuple[str, ...], ...] = attrs.field(default=(), converter=lambda rows: tuple(map(tuple, rows)))

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["blame"], data["hosts"] = list(self.blame), list(self.hosts)
        data["figures"] = [dict(f) for f in self.figures]
        data["table"] = [list(row) for row in self.table]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        names = {a.name for a in attrs.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@attrs.frozen
class RankState:
    """What one rank left behind: its checks so far, the step it was in, and how its process ended.

    ``exit`` is the exit code (negative: killed by that signal), ``None`` while unknown; ``stopped``
    says the launcher killed it at the timeout (it hung).
    """

    rank: int
    host: str = "?"
    checks: tuple[Check, ...] = ()
    current: str | None = None
    exit: int | None = None
    stopped: bool = False
    #: Nothing was heard from this rank after the rendezvous (rank 0's view in a job started by others).
    silent: bool = False
    #: The last line the rank printed, when it died or hung (its error, usually).
    output: str = ""
    #: The rank this one could only wait for, when it was stopped because that rank had ended (rank 0
    #: gone from the rendezvous); None when it was stopped (``stopped``) at the timeout: it hung.
    waited_for: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["checks"] = [c.to_dict() for c in self.checks]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankState:
        checks = tuple(Check.from_dict(c) for c in data.get("checks", ()))
        names = {a.name for a in attrs.fields(cls)} - {"rank", "checks"}
        return cls(int(data["rank"]), checks=checks, **{k: v for k, v in data.items() if k in names})


@attrs.frozen
class CheckReport:
    """The whole run's checks, in :data:`STEPS` order; ``ok`` when none failed."""

    checks: tuple[Check, ...]
    world_size: int
    hosts: tuple[str, ...] = ()
    summary: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.ok)

    @property
    def warnings(self) -> tuple[Check, ...]:
        """The checks that passed with a warning (a slow link)."""
        return tuple(check for check in self.checks if check.status == WARN)

    def __getitem__(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "world_size": self.world_size,
            "hosts": list(self.hosts),
            "summary": self.summary,
            "seconds": round(self.seconds, 3),
            "warnings": [check.name for check in self.warnings],
            "checks": [check.to_dict() for check in self.checks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        """One line per check; a failure is followed by its blame, the differences and the fix."""
        lines = [f"resolver check: {self.summary}"] if self.summary else []
        for check in self.checks:
            mark = {OK: "ok  ", FAIL: "FAIL", SKIP: "skip", WARN: "WARN"}[check.status]
            lines.append(f"{mark} {check.name:<11} {check.detail}".rstrip())
            if check.table:
                widths = [max(len(row[i]) for row in check.table) for i in range(len(check.table[0]))]
                for row in check.table:
                    cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                    lines.append(("       " + "  ".join(cells)).rstrip())
            for figure in check.figures:
                lines.append("       " + _figure_text(figure))
            if check.status in (FAIL, WARN) and check.fix:
                lines.append(f"       = help: {check.fix}")
        verdict = "passed" if self.ok else f"FAILED ({', '.join(c.name for c in self.failed)})"
        if self.ok and self.warnings:
            verdict += f" with {len(self.warnings)} warning{'s' if len(self.warnings) != 1 else ''} "
            verdict += f"({', '.join(c.name for c in self.warnings)})"
        ranks = f"{self.world_size} rank{'s' if self.world_size != 1 else ''}"
        lines.append(f"{len(self.checks)} checks, {verdict}, {ranks}, {self.seconds:.1f} s")
        return "\n".join(lines)


def _figure_text(figure: Mapping[str, Any]) -> str:
    if "pair" in figure:
        slow = "  <- slow" if figure.get("slow") else ""
        return (f"{figure['pair']:<22} {_size(figure['bytes']):>7}  {figure['latency_us']:>9.1f} us  "
                f"{figure['busbw_gbps']:>8.3f} GB/s{slow}")  # fmt: skip
    return (f"{figure['op']:<11} {_size(figure['bytes']):>7}  {figure['latency_us']:>9.1f} us  "
            f"algbw {figure['algbw_gbps']:>8.3f} GB/s  busbw {figure['busbw_gbps']:>8.3f} GB/s")  # fmt: skip


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def _where(ranks: Iterable[int], hosts: Mapping[int, str]) -> str:
    ranks = sorted(set(ranks))
    named = [f"rank {r} ({hosts.get(r, '?')})" for r in ranks]
    return ", ".join(named)


def _ended(state: RankState, timeout: float) -> str:
    step = state.current or "start-up"
    said = f' (its last line: "{state.output}")' if state.output else ""
    if state.stopped and state.waited_for is not None:
        waited = state.waited_for
        if state.current is None:
            return (f"rank {state.rank} ({state.host}) was still starting: stopped when rank {waited} ended, "
                    f"as it could only wait for rank {waited}")  # fmt: skip
        return f"rank {state.rank} ({state.host}) was waiting for rank {waited} in {step}: stopped when it ended"
    if state.stopped:
        return f"rank {state.rank} ({state.host}) hung in {step}: stopped after the {timeout:g} s timeout{said}"
    if state.exit is not None and state.exit < 0:
        return f"rank {state.rank} ({state.host}) was killed by signal {-state.exit} during {step}{said}"
    return f"rank {state.rank} ({state.host}) exited with code {state.exit} during {step}{said}"


def merge(states: Sequence[RankState], world_size: int, *, timeout: float, summary: str = "",
          seconds: float = 0.0) -> CheckReport:  # fmt: skip
    """One report from every rank's entries and how each rank process ended.

    A check fails when any rank's entry for it failed; the entries that are not echoes (the
    cause) are shown, echoes only when there is no cause. A rank with no entry for a check
    that it did not finish (it died or hung there) is blamed for that check, and later checks
    are skipped.
    """
    hosts = {s.rank: s.host for s in states}
    by_rank = {s.rank: {c.name: c for c in s.checks} for s in states}
    silent = sorted({s.rank for s in states if s.silent} | {r for r in range(world_size) if r not in by_rank})
    merged: list[Check] = []
    broken = False
    for name in STEPS:
        if broken:
            merged.append(Check(name, SKIP, "not run: an earlier check failed"))
            continue
        entries = [checks[name] for checks in by_rank.values() if name in checks]
        gone = [s for s in states if not s.silent and name not in by_rank[s.rank] and _unfinished(s, name)]
        failures = [e for e in entries if e.status == FAIL]
        causes = [e for e in failures if not e.echo]
        if gone:
            # A rank that died is the cause; one stopped while waiting (hung) is the consequence of
            # another rank's own failure here when there is one (rank 0 that cannot listen).
            died = [s for s in gone if not s.stopped]
            if died or not causes:
                culprits = died or gone
                blame = [s.rank for s in culprits]
                text = "; ".join(_ended(s, timeout) for s in gone)
                fix = _death_fix(culprits, timeout)
            else:
                blame = sorted({r for e in causes for r in e.blame})
                text = "; ".join([*dict.fromkeys(e.detail for e in causes), *(_ended(s, timeout) for s in gone)])
                fix = "; ".join(dict.fromkeys(e.fix for e in causes if e.fix))
            merged.append(Check(name, FAIL, text, blame, [hosts.get(r, "?") for r in blame], fix=fix))
            broken = True
            continue
        if failures and not causes and silent:
            text = "; ".join(f"no word from rank {r} ({hosts.get(r, '?')}) since the rendezvous: it hung or died "
                             "in this check or before" for r in silent)  # fmt: skip
            merged.append(Check(name, FAIL, text, silent, [hosts.get(r, "?") for r in silent],
                                fix="read that rank's own output (its stderr names its failure)"))  # fmt: skip
            broken = True
            continue
        if not entries:
            merged.append(Check(name, SKIP, "not run"))
            continue
        if not failures:
            statuses = {e.status for e in entries}
            first = min(entries, key=lambda e: 0 if e.figures or e.table else 1)  # rank 0's figures
            figures = [f for e in entries for f in e.figures] if name == "ring" else list(first.figures)
            check = attrs.evolve(first, status=OK if OK in statuses else SKIP, figures=figures)
            merged.append(_flag_slow_links(check) if name == "ring" else check)
            continue
        causes = causes or failures
        blame = sorted({r for e in causes for r in e.blame})
        # a blamed rank's own (echo) entry says what it saw: shown beside the cause
        explained = causes + [e for e in failures if e.echo and e not in causes and _rank_of(e) in blame]
        details = list(dict.fromkeys(e.detail for e in explained))
        fixes = list(dict.fromkeys(e.fix for e in causes if e.fix))
        table = next((e.table for e in causes if e.table), ())
        merged.append(Check(name, FAIL, "; ".join(details), blame, [hosts.get(r, "?") for r in blame],
                            fix="; ".join(fixes), table=table))  # fmt: skip
        broken = name != "agreement" or any(_blocking(e) for e in causes)
    ordered_hosts = tuple(hosts.get(r, "?") for r in range(world_size))
    return CheckReport(tuple(merged), world_size, ordered_hosts, summary, seconds)


def _flag_slow_links(ring: Check) -> Check:
    """The ring's check with its slow pairs (see :mod:`runtime.preflight.links`) flagged: a warning
    naming each pair with its figures, and the pair's figure lines marked."""
    from runtime.preflight.links import describe, slow_pairs

    findings = slow_pairs(ring.figures)
    if not findings:
        return ring
    slow = {finding["pair"]: {s["bytes"] for s in finding["slow"]} for finding in findings}
    figures = [{**f, "slow": True} if f.get("bytes") in slow.get(f.get("pair"), ()) else f for f in ring.figures]
    ranks = sorted({r for finding in findings for r in finding.get("ranks", ())})
    hosts = list(dict.fromkeys(h for finding in findings for h in finding.get("hosts", ())))
    return attrs.evolve(
        ring,
        status=WARN,
        detail=f"{ring.detail}; {describe(findings)}",
        blame=ranks,
        hosts=hosts,
        figures=figures,
        fix="the job runs, but every step waits for this link: compare the hosts' network (the link speed "
        "`ethtool <interface>` reports, the interface gloo/NCCL picked: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, "
        "a shared or congested switch port) and run the check again to see whether it is stable",
    )


def _rank_of(check: Check) -> int | None:
    """The rank an entry's detail is written by (``rank N ...`` at its start)."""
    words = check.detail.split()
    return (
        int(words[1].rstrip(":")) if len(words) > 1 and words[0] == "rank" and words[1].rstrip(":").isdigit() else None
    )


def _unfinished(state: RankState, name: str) -> bool:
    """Whether ``state``'s rank ended (or was stopped) before finishing check ``name``."""
    if state.exit == 0 and not state.stopped:
        return False
    done = {c.name for c in state.checks}
    if state.current is None:
        return name == STEPS[0] and not done
    order = STEPS.index(state.current) if state.current in STEPS else len(STEPS)
    return STEPS.index(name) == order and name not in done


def _blocking(check: Check) -> bool:
    return "collectives skipped" in check.detail


def _death_fix(gone: Sequence[RankState], timeout: float) -> str:
    if any(s.stopped for s in gone):
        return ("look at that rank's stack while it hangs (py-spy dump --pid PID); if it is only slow, "
                f"raise --timeout (now {timeout:g} s)")  # fmt: skip
    return "find why that rank ended (its last line is quoted when it printed one); the other ranks only waited for it"
