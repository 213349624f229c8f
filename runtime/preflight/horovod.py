"""``resolver check`` under ``horovodrun``: where the check's own rendezvous store listens.

Horovod's processes meet at ``HOROVOD_GLOO_RENDEZVOUS_ADDR:HOROVOD_GLOO_RENDEZVOUS_PORT``: the
HTTP key-value server of horovodrun's driver, not rank 0, so the check's store cannot listen
there. Rank 0 picks a free port on its own host and puts its address and that port in the
driver's store (a scope of its own); the other ranks read them from there. The address rank 0
gives is the one its host uses to reach the driver: an address the other hosts, which reach the
same driver, can route to. Horovod itself is joined later, by the collectives step.
"""

from __future__ import annotations

import os
import socket
import time

from runtime._protocol.ports import find_free_port
from runtime.preflight.report import FAIL, Check

__all__ = ["SCOPE", "check_store_address"]

#: The scope of the driver's key-value store that the check writes to (Horovod's own are
#: ``global``, ``local_<host>`` and ``cross_<rank>``).
SCOPE = "resolver-check"
_VARIABLES = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT")


def _address_towards(address: str, port: int) -> str:
    """This host's address on the route to ``address`` (a UDP socket's name: no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, port))
        return str(probe.getsockname()[0])


def check_store_address(rank: int, timeout: float) -> tuple[str, int] | Check:
    """Rank 0's address and the port of the check's store, agreed through horovodrun's driver;
    or, when that fails, this rank's failed rendezvous check saying why."""
    from horovod.runner.http.http_client import put_data_into_kvstore, read_data_from_kvstore

    host = socket.gethostname()
    missing = [name for name in _VARIABLES if not os.environ.get(name)]
    if missing:
        return Check("rendezvous", FAIL, f"rank {rank} on {host}: {' and '.join(missing)} not set",
                     (rank,), (host,), fix="start the check with `horovodrun -np <processes> --gloo resolver check "
                     "...`, which sets them")  # fmt: skip
    driver, driver_port = os.environ[_VARIABLES[0]], int(os.environ[_VARIABLES[1]])
    key = "store"
    if rank == 0:
        ours = (_address_towards(driver, driver_port), find_free_port())
        try:
            put_data_into_kvstore(driver, driver_port, SCOPE, key, ours)
        except RuntimeError as exc:
            return Check("rendezvous", FAIL, f"rank 0 on {host} cannot write to horovodrun's store at "
                         f"{driver}:{driver_port}: {exc.args[-1]}", (0,), (host,),
                         fix="horovodrun's driver stopped, or this host cannot reach it")  # fmt: skip
        return ours
    deadline = time.monotonic() + timeout
    while True:
        try:
            address, port = read_data_from_kvstore(driver, driver_port, SCOPE, key)
            return str(address), int(port)
        except RuntimeError as exc:  # not there yet (404), or the driver is gone
            if time.monotonic() > deadline:
                return Check("rendezvous", FAIL, f"rank {rank} on {host}: rank 0 did not say where the check's store "
                             f"listens (horovodrun's store at {driver}:{driver_port}) within {timeout:g} s: "
                             f"{exc.args[-1]}", (rank,), (host,), echo=True,
                             fix="see rank 0's output: it failed before the check started")  # fmt: skip
            time.sleep(0.05)
