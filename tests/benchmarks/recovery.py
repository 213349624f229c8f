"""Recovery after a fault, on hosts made of network namespaces (issue 38, point 4). Needs root.

    python tests/benchmarks/recovery.py --launcher torchrun --repeats 3
    python tests/benchmarks/recovery.py --launcher resolver --repeats 3
    python tests/benchmarks/recovery.py --launcher torchrun --cases node-loss --hand is_host --verbose
    python tests/benchmarks/recovery.py --launcher torchrun --plain --hand is_host,local_addr,gloo_ifname

Each run starts ``recovery_training.py`` (DDP over gloo on the CPU, a checkpoint after every step, a
timestamped ``STEP`` line per step with its world size) under the launcher on one or two hosts
(``tests/support/two_hosts_support.py``: veth addresses, own host names, no DNS), waits for step
``--kill-at``, makes the fault and times it from the fault to the first step of the group that
follows (the rank's own clock; one machine, one clock). Cases:

- ``node-loss``: two hosts, ``--nnodes 1:2 --rdzv-backend c10d --rdzv-endpoint HOST1:PORT
  --max-restarts 3``; ``kill -9`` of every process of host 2 (its launcher and ranks); figure: the
  kill to the first step of the shrunk job on host 1. torchrun gets the hand settings of ``--hand``
  (default: the smallest set found to train here, see ``TORCHRUN_HAND``); ``resolver run`` none.
- ``node-loss-defaults`` (torchrun): the same with no hand setting; the case reports whether it
  trained within ``--defaults-wait`` seconds (then it is killed) and why not.
- ``rank-death-1node``: one host (host 1's namespace under this machine's name, which resolves:
  torchrun ``--standalone`` looks it up), ``--standalone --nproc-per-node 2 --max-restarts 1``; ``kill -9``
  of rank 1's process; figure: the kill to the restarted group's first step.
- ``rank-death-2nodes``: two hosts, ``--nnodes 2 --nproc-per-node P`` (``--nproc-per-node``, 1) on
  c10d, ``--max-restarts 1``; ``kill -9`` of host 2's highest rank.

``--plain`` runs the ranks in torch alone (no ``runtime.launch``), to time the launcher by itself;
``--verbose`` shows what the launchers printed between the fault and the next group's first step.
The figures measured, and why some cases give none: ``tests/benchmarks/README.md``.

The control, beside each figure: the step interval without faults (median time between the steps of
one rank before the fault, in the same run). Each case runs ``--repeats`` times; the summary line
``CASE <name>: ...`` gives the median and every run, or why there is no figure. A launcher that
refuses a case (``resolver run``'s ``error:`` before any rank trained) is reported as "not supported
on this build" with its message. Not a test: the figures depend on the machine and its load (printed);
``--quick`` is the smallest run (``test_recovery_script.py``). Every process, namespace and temporary
file is gone afterwards, also after an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import attrs

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "support")]

from recovery_jobs import Jobs, Step, kill_every_process, launcher_environment, start_in  # noqa: E402
from two_hosts_support import TwoHosts, host_environment, missing_prerequisite  # noqa: E402

SCRIPT = HERE / "recovery_training.py"
NAMES = {"torchrun": "torchrun", "resolver": "resolver run"}
CASES = ("node-loss", "node-loss-defaults", "rank-death-1node", "rank-death-2nodes")
#: torchrun's settings by hand on namespace hosts: ``--rdzv-conf is_host=1`` on host 1 (``=0`` on host 2),
#: ``--local-addr HOST_ADDRESS``, ``GLOO_SOCKET_IFNAME=HOST_INTERFACE``. The smallest set that trained here
#: (2026-11-29, torch 2.13): is_host and local_addr. Without is_host both agents stop at once (their c10d
#: store check resolves the host name: socket.gaierror); without local_addr the ranks wait for a store at
#: the host's name, which does not resolve; GLOO_SOCKET_IFNAME is not needed because the script's
#: ``runtime.launch`` binds gloo to the interface that routes to rank 0 (a plain torch script needs it).
HAND_SETTINGS = ("is_host", "local_addr", "gloo_ifname")
TORCHRUN_HAND = ("is_host", "local_addr")


@attrs.frozen
class Settings:
    launcher: str
    hand: tuple[str, ...]
    nproc_per_node: int
    kill_at: int
    step_seconds: float
    start_wait: float
    wait: float
    defaults_wait: float
    verbose: bool
    plain: bool


@attrs.frozen
class Outcome:
    """A run's figure (seconds from the fault to the next group's first step) or why there is none."""

    seconds: float | None = None
    interval: float | None = None
    world: str = ""
    why: str = ""
    unsupported: bool = False


def launcher_command(settings: Settings) -> list[str]:
    if settings.launcher == "torchrun":
        return [str(Path(sys.executable).with_name("torchrun"))]
    return [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu"]


def node_commands(case: str, settings: Settings, hosts: TwoHosts, port: int) -> list[tuple[list[str], dict[str, str]]]:
    """Each host's command line and extra variables for ``case``: torchrun's own options on both
    launchers, torchrun's hand settings (``settings.hand``) on torchrun only."""
    script = [str(SCRIPT), "{out}", str(settings.step_seconds)]
    if case == "rank-death-1node":
        return [([*launcher_command(settings), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                  *script], {})]  # fmt: skip
    nnodes, restarts = ("1:2", "3") if case.startswith("node-loss") else ("2", "1")
    main = hosts.hosts[0]
    hand = settings.hand if settings.launcher == "torchrun" and case != "node-loss-defaults" else ()
    commands = []
    for node, host in enumerate(hosts.hosts):
        extra: list[str] = []
        if "is_host" in hand:
            extra += ["--rdzv-conf", f"is_host={int(node == 0)}"]
        if "local_addr" in hand:
            extra += ["--local-addr", host.address]
        env = {"GLOO_SOCKET_IFNAME": host.interface} if "gloo_ifname" in hand else {}
        options = ["--nnodes", nnodes, "--nproc-per-node", str(settings.nproc_per_node), "--rdzv-backend",
                   "c10d", "--rdzv-endpoint", f"{main.address}:{port}", "--rdzv-id", "recovery",
                   "--max-restarts", restarts]  # fmt: skip
        commands.append(([*launcher_command(settings), *options, *extra, *script], env))
    return commands


def _median_interval(steps: list[Step], before: float) -> float | None:
    first = [s for s in steps if s.at <= before and s.rank == 0]
    gaps = [b.at - a.at for a, b in zip(first, first[1:], strict=False) if b.step == a.step + 1]
    return statistics.median(gaps) if gaps else None


def run_once(case: str, settings: Settings) -> Outcome:
    """One run of ``case``: hosts made, launchers started, the fault, the figure; all removed after."""
    hosts = TwoHosts.create()
    used = hosts.hosts[:1] if case == "rank-death-1node" else hosts.hosts
    tmp = tempfile.mkdtemp(prefix="recovery-")
    jobs = Jobs([h.namespace for h in hosts.hosts])
    try:
        (Path(tmp) / "tmp").mkdir()
        port = 29500 + os.getpid() % 1000
        for host, (argv, extra) in zip(used, node_commands(case, settings, hosts, port), strict=False):
            argv = [a.replace("{out}", str(Path(tmp) / "out")) for a in argv]
            plain = {"RECOVERY_PLAIN": "1"} if settings.plain else {}
            env = launcher_environment(host_environment(), str(Path(tmp) / "tmp"), {**extra, **plain})
            # One host keeps this machine's name, which resolves (torchrun --standalone looks it up).
            jobs.start(start_in(host.namespace, argv, env, None if len(used) == 1 else host.hostname))
        return _fault_and_recovery(case, settings, hosts, jobs)
    finally:
        jobs.stop()
        hosts.remove()
        shutil.rmtree(tmp, ignore_errors=True)
        left = hosts.namespaces_left()
        if left:
            raise RuntimeError(f"namespaces left behind: {left}")


def _fault_and_recovery(case: str, settings: Settings, hosts: TwoHosts, jobs: Jobs) -> Outcome:
    full = 2 if case == "rank-death-1node" else 2 * settings.nproc_per_node
    start_wait = settings.defaults_wait if case == "node-loss-defaults" else settings.start_wait
    ready = jobs.wait_for(lambda s: next((x for x in s if x.step >= settings.kill_at and x.world == full), None),
                          start_wait)  # fmt: skip
    if ready is None:
        reasons = "; ".join(f"host {n + 1}: {jobs.why_not(n)}" for n in range(len(jobs.processes)))
        if any(jobs.refused(n) for n in range(len(jobs.processes))):
            return Outcome(why=f"not supported on this build: {NAMES[settings.launcher]} refused it ({reasons})",
                           unsupported=True)  # fmt: skip
        trained = "trained, but not to step" if jobs.output.steps() else "did not train to step"
        running = any(p.poll() is None for p in jobs.processes)
        when = f"within {start_wait:g} s (then killed)" if running else "(every launcher exited)"
        return Outcome(why=f"{trained} {settings.kill_at} {when}: {reasons}")
    steps = jobs.output.steps()
    before = max(s.restart for s in steps)
    fault_host = hosts.hosts[0 if case == "rank-death-1node" else 1]
    if case.startswith("node-loss"):
        killed_at = time.time()
        kill_every_process(fault_host.namespace)
    else:
        victims = [s for s in steps if s.restart == before and s.host == fault_host.hostname and s.rank > 0]
        victim = max(victims or [s for s in steps if s.rank > 0], key=lambda s: (s.step, s.rank))
        killed_at = time.time()
        os.kill(victim.pid, signal.SIGKILL)
    interval = _median_interval(steps, killed_at)

    def next_group(seen: list[Step]) -> Step | None:
        # A new attempt, or (a launcher that counts a shrunk round as no restart) a smaller world.
        return next((s for s in seen if s.at > killed_at and (s.restart > before or s.world != full)), None)

    first = jobs.wait_for(next_group, settings.wait)
    if settings.verbose:
        _show_output(jobs, killed_at, time.time() if first is None else first.at)
    if first is None:
        reasons = "; ".join(f"host {n + 1}: {jobs.why_not(n)}" for n in range(len(jobs.processes)))
        return Outcome(interval=interval, why=f"no step of a new group within {settings.wait:g} s: {reasons}")
    return Outcome(first.at - killed_at, interval, world=f"world {full} -> {first.world}")


def _show_output(jobs: Jobs, killed_at: float, until: float) -> None:
    """``--verbose``: what each launcher printed from the fault to the next group's first step (no STEP
    lines), each line with its time from the fault."""
    for number in range(len(jobs.processes)):
        for at, line in jobs.output.timed_lines(number):
            if killed_at - 1 <= at <= until + 1 and "STEP " not in line:
                print(f"    host {number + 1} +{at - killed_at:6.2f} s  {line[:200]}")


def _figures(outcomes: list[Outcome]) -> str:
    done = [o for o in outcomes if o.seconds is not None]
    if not done:
        why = outcomes[0].why if outcomes else "no run"
        return f"no figure: {why}"
    seconds = [o.seconds for o in done if o.seconds is not None]
    intervals = [o.interval for o in done if o.interval is not None]
    control = f"{statistics.median(intervals):.3f} s" if intervals else "n/a"
    text = (f"median {statistics.median(seconds):.2f} s over {len(done)} of {len(outcomes)} runs "
            f"(runs: {', '.join(f'{s:.2f}' for s in seconds)}; {done[0].world}); "
            f"control: step interval without faults {control}")  # fmt: skip
    failed = [o.why for o in outcomes if o.seconds is None]
    return text + (f"; {len(failed)} without a figure, first: {failed[0]}" if failed else "")


def describe(case: str, settings: Settings) -> str:
    hand = ", ".join(settings.hand) if settings.launcher == "torchrun" and settings.hand else "none"
    what = {
        "node-loss": f"kill -9 of every process of host 2 at step {settings.kill_at} -> first step of the shrunk "
        f"job (--nnodes 1:2, hand settings: {hand})",
        "node-loss-defaults": "the same with no hand setting: does it train?",
        "rank-death-1node": f"kill -9 of rank 1 of 2 at step {settings.kill_at} -> first step of the restarted group",
        "rank-death-2nodes": f"kill -9 of a rank of host 2 ({settings.nproc_per_node} per host) at step "
        f"{settings.kill_at} -> first step of the restarted group",
    }
    return what[case]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=("torchrun", "resolver"), default="torchrun")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=None, help="default: every case")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hand", default=",".join(TORCHRUN_HAND),
                        help=f"torchrun's hand settings on two hosts, of {', '.join(HAND_SETTINGS)} (comma-separated; "
                        "none: the empty string)")  # fmt: skip
    parser.add_argument("--nproc-per-node", type=int, default=1, help="ranks per host on two hosts")
    parser.add_argument("--kill-at", type=int, default=20, help="the step at which the fault is made")
    parser.add_argument("--step-seconds", type=float, default=0.1, help="the script's sleep after each step")
    parser.add_argument("--start-wait", type=float, default=120, help="seconds for the job to reach --kill-at")
    parser.add_argument("--wait", type=float, default=150, help="seconds for the next group's first step")
    parser.add_argument("--defaults-wait", type=float, default=60, help="node-loss-defaults: seconds to train")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="ranks in torch alone, not runtime.launch (on two hosts add gloo_ifname to --hand)",
    )
    parser.add_argument("--verbose", action="store_true", help="show what the launchers printed during recovery")
    parser.add_argument("--quick", action="store_true", help="smallest run: 1 repeat, kill at step 3, waits 20-30 s")
    options = parser.parse_args(argv)
    why_not = missing_prerequisite()
    if why_not is not None:
        print(f"cannot make namespace hosts here: {why_not}", file=sys.stderr)
        return 2
    hand = tuple(h for h in options.hand.split(",") if h)
    if unknown := set(hand) - set(HAND_SETTINGS):
        parser.error(f"--hand {options.hand}: unknown {sorted(unknown)}; choose from {', '.join(HAND_SETTINGS)}")
    quick = options.quick
    settings = Settings(options.launcher, hand, options.nproc_per_node, 3 if quick else options.kill_at,
                        options.step_seconds, 30 if quick else options.start_wait, 25 if quick else options.wait,
                        20 if quick else options.defaults_wait, options.verbose, options.plain)  # fmt: skip
    repeats = 1 if quick else options.repeats
    cases = options.cases or [c for c in CASES if options.launcher == "torchrun" or c != "node-loss-defaults"]
    ranks = "torch alone (--plain)" if options.plain else "runtime.launch"
    print(f"recovery under {NAMES[options.launcher]}, ranks in {ranks}: {repeats} run(s) per case, "
          f"load average {os.getloadavg()[0]:.1f} "
          f"({os.cpu_count()} CPUs)", flush=True)  # fmt: skip
    for case in cases:
        print(f"{case}: {describe(case, settings)}", flush=True)
        outcomes: list[Outcome] = []
        for number in range(repeats):
            outcome = run_once(case, settings)
            outcomes.append(outcome)
            figure = f"{outcome.seconds:.2f} s ({outcome.world})" if outcome.seconds is not None else outcome.why
            step = f"; step interval {outcome.interval:.3f} s" if outcome.interval is not None else ""
            print(f"  run {number + 1}: {figure}{step}; load average {os.getloadavg()[0]:.1f}", flush=True)
            if outcome.unsupported:
                break
        print(f"CASE {case}: {_figures(outcomes)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
