"""``resolver check`` in ranks someone else started, when the main port is answered by a program that
is not rank 0 (a listener that accepts and stays silent, one that closes its side, an HTTP server):
every rank ends within its timeouts, each with its verdict and the fix, and nothing is left running."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from preflight_support import check_environment

pytestmark = pytest.mark.timeout(240)

HOST = socket.gethostname()


def _env(**extra: str) -> dict[str, str]:
    return check_environment(**extra)


def _answer(kind: str, connection: socket.socket) -> None:
    if kind == "half-closed":  # it accepts, then closes its sending side and never answers
        connection.shutdown(socket.SHUT_WR)
    elif kind == "http":  # a web server (or proxy) on the port: it reads a request and answers 400
        connection.settimeout(2.0)
        try:
            connection.recv(4096)
        except OSError:
            pass
        connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        connection.close()
    # "silent": it accepts and keeps the connection open without a word


@contextmanager
def foreign_listener(kind: str) -> Iterator[int]:
    """A program that is not rank 0 on a free port (all addresses) of this host, until the block ends."""
    server = socket.socket()
    server.bind(("", 0))
    server.listen(16)
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(connection)
            _answer(kind, connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for connection in accepted:
            connection.close()
        server.close()


@pytest.mark.parametrize("kind", ["silent", "half-closed", "http"])
def test_every_rank_ends_with_its_verdict_when_a_foreign_program_holds_the_main_port(kind):
    command = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2", "--timeout", "3"]
    with foreign_listener(kind) as port:
        common = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      TORCHELASTIC_RUN_ID="check", GROUP_RANK="0")  # fmt: skip
        ranks = [subprocess.Popen(command, env=_env(**common, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in (0, 1)]  # fmt: skip
        try:
            # a bound against the hang this test is about, not a measure: torch's import alone takes seconds here
            (out0, err0), (out1, err1) = (rank.communicate(timeout=120) for rank in ranks)
        finally:
            for rank in ranks:
                if rank.poll() is None:
                    rank.kill()
                    rank.communicate()
    assert ranks[0].returncode == 1 and ranks[1].returncode == 1, out0 + err0 + out1 + err1
    assert f"FAIL rendezvous  rank 0 on {HOST} cannot listen on port {port} (from MASTER_PORT)" in out0
    verdict = (f"resolver check: rank 1: rendezvous: rank 1 on {HOST}: 127.0.0.1:{port} (from MASTER_PORT) is "
               "answered by something that is not this job's rank 0")  # fmt: skip
    assert verdict in err1, err1
    assert f"= help: another program (or another run) holds port {port} on rank 0's host: set MASTER_PORT" in err1
    assert out1 == ""  # only rank 0 prints the report
