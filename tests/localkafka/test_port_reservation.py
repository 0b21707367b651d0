"""A port picked for a server that starts later is kept from every other bind until released.

The loss path (session 15, repetition round 2): LocalKafka picked its six ports with a socket it
closed at once; a test on the other xdist worker started a server in the 30-60 s before the
brokers listened and the kernel gave it one of those ports; every broker's Raft client read that
server's reply as a Kafka response size and the three JVMs died out of heap together.
"""

from __future__ import annotations

import errno
import socket

import pytest

from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.localproc import PortReservation


def _bind(port: int, reuse: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def test_a_reserved_port_is_withheld_from_binds_to_port_0_and_open_to_its_server() -> None:
    with PortReservation() as held:
        with pytest.raises(OSError) as refused, _bind(held.port, reuse=False):
            pass
        assert refused.value.errno == errno.EADDRINUSE
        others = [_bind(0, reuse=i % 2 == 0) for i in range(2000)]  # what other servers and free_port() do
        try:
            assert held.port not in {sock.getsockname()[1] for sock in others}
        finally:
            for sock in others:
                sock.close()
        with _bind(held.port, reuse=True) as server:  # the server it was held for, as the JVM binds
            server.listen()
            with socket.create_connection(("127.0.0.1", held.port), timeout=5):
                conn, _ = server.accept()
                conn.close()


def test_a_released_port_is_anyones_again() -> None:
    held = PortReservation()
    held.release()
    with _bind(held.port, reuse=False):
        pass
    held.release()  # twice is harmless


def test_a_port_held_by_another_socket_cannot_be_reserved() -> None:
    with PortReservation() as held, pytest.raises(OSError), _bind(held.port, reuse=False):
        pass
    with _bind(0, reuse=False) as other:
        other.listen()
        with pytest.raises(OSError):
            PortReservation(other.getsockname()[1])


def test_a_cluster_holds_its_ports_while_a_broker_is_down_and_lets_them_go_on_stop() -> None:
    kafka = LocalKafka(brokers=1).start()
    try:
        port = int(kafka.address_of(1).rsplit(":", 1)[1])
        kafka.kill(1)
        # down: its ports are still withheld from binds to port 0 (a plain explicit bind is refused)
        with pytest.raises(OSError), _bind(port, reuse=False):
            pass
        kafka.restart(1)
    finally:
        kafka.stop()
    assert not kafka._reservations
