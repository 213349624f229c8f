"""horovodrun (Gloo): it started every process and exported Horovod's rendezvous.

Ranks and sizes come from ``HOROVOD_RANK``/``HOROVOD_SIZE``/``HOROVOD_LOCAL_RANK``/
``HOROVOD_CROSS_RANK`` (read by the rules into the resolved config); the rendezvous Horovod's
processes meet at is ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``HOROVOD_GLOO_RENDEZVOUS_PORT``, which
Horovod itself reads when the collective is set up: the HTTP key-value server of horovodrun's
driver, not rank 0, so a store of the run's own (``resolver check``'s) cannot listen there
(:meth:`HorovodEnvironment.store_address`).
"""

from __future__ import annotations

import socket
import time

from runtime._protocol.ports import find_free_port
from runtime.cluster.base import ClusterEnvironment, StoreAddressError

__all__ = ["SCOPE", "HorovodEnvironment"]

#: The scope of the driver's key-value store that the run's own store address goes to (Horovod's own
#: are ``global``, ``local_<host>`` and ``cross_<rank>``).
SCOPE = "resolver-check"
_VARIABLES = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT")


def _address_towards(address: str, port: int) -> str:
    """This host's address on the route to ``address`` (a UDP socket's name: no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, port))
        return str(probe.getsockname()[0])


class HorovodEnvironment(ClusterEnvironment):
    """The rendezvous of a ``horovodrun --gloo`` job: Horovod's own Gloo rendezvous server."""

    title = "a horovodrun job"
    variables_hint = "start the script with `horovodrun -np <processes> --gloo python script.py`, which exports them"

    def store_address(self, rank: int, timeout: float) -> tuple[str, int, str | None]:
        """Rank 0 picks a free port on its own host and puts its address (the one its host uses to
        reach the driver: one the other hosts, which reach the same driver, can route to) and that
        port in the driver's store, in a scope of its own; the other ranks read them from there."""
        from horovod.runner.http.http_client import put_data_into_kvstore, read_data_from_kvstore

        source = "a free port of rank 0's host, passed through horovodrun's store"
        host = socket.gethostname()
        missing = [name for name in _VARIABLES if not self.environ.get(name)]
        if missing:
            raise StoreAddressError(f"rank {rank} on {host}: {' and '.join(missing)} not set",
                                    "start the check with `horovodrun -np <processes> --gloo resolver check ...`, "
                                    "which sets them")  # fmt: skip
        driver, driver_port = self.environ[_VARIABLES[0]], int(self.environ[_VARIABLES[1]])
        key = "store"
        if rank == 0:
            ours = (_address_towards(driver, driver_port), find_free_port())
            try:
                put_data_into_kvstore(driver, driver_port, SCOPE, key, ours)
            except RuntimeError as exc:
                raise StoreAddressError(
                    f"rank 0 on {host} cannot write to horovodrun's store at {driver}:{driver_port}: {exc.args[-1]}",
                    "horovodrun's driver stopped, or this host cannot reach it",
                ) from None
            return (*ours, source)
        deadline = time.monotonic() + timeout
        while True:
            try:
                address, port = read_data_from_kvstore(driver, driver_port, SCOPE, key)
                return str(address), int(port), source
            except RuntimeError as exc:  # not there yet (404), or the driver is gone
                if time.monotonic() > deadline:
                    raise StoreAddressError(f"rank {rank} on {host}: rank 0 did not say where the check's store "
                                            f"listens (horovodrun's store at {driver}:{driver_port}) within "
                                            f"{timeout:g} s: {exc.args[-1]}",
                                            "see rank 0's output: it failed before the check started",
                                            echo=True) from None  # fmt: skip
                time.sleep(0.05)
