"""The local head that `cuberay up` starts: its ports and how it is told apart from other processes.

Real sockets and real processes; nothing here starts Ray.
"""

from __future__ import annotations

import re
import socket
from typing import Iterator

import pytest

from cuberay.platform.control import head


@pytest.fixture
def os_offers_the_first_port_again(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The port-choosing primitive, made to hand back the first port a second time.

    Both sockets really hold the port: with SO_REUSEADDR on both, Linux lets two sockets that do not listen
    bind the same address, as the OS may offer a port again once the first socket is closed.
    """
    bound: list[socket.socket] = []
    offered: list[int] = []

    def bind_free() -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", offered[0] if len(offered) == 1 else 0))
        bound.append(sock)
        offered.append(sock.getsockname()[1])
        return sock

    monkeypatch.setattr(head, "_bind_free", bind_free)
    yield offered
    for sock in bound:
        sock.close()


def test_ports_stay_distinct_when_the_os_offers_one_twice(os_offers_the_first_port_again: list) -> None:
    ports = head.free_ports(3)
    offered = os_offers_the_first_port_again
    assert offered[0] == offered[1]
    assert len(set(ports)) == 3, (ports, offered)


def test_the_head_command_gives_each_component_its_own_port(os_offers_the_first_port_again: list) -> None:
    command, port, dashboard_port = head.head_command("127.0.0.1", "/tmp/cr-test")
    flags = dict(re.fullmatch(r"--([a-z-]+)=(.*)", arg).groups() for arg in command if arg.startswith("--")
                 and "=" in arg)
    fixed = {name: int(value) for name, value in flags.items() if name.endswith("port") and value != "0"}
    # `ray start --head` fixes 10001 for its Ray Client server when given none: another head may hold it.
    assert set(fixed) == {"port", "dashboard-port", "ray-client-server-port"}, flags
    assert len(set(fixed.values())) == len(fixed), fixed
    assert (fixed["port"], fixed["dashboard-port"]) == (port, dashboard_port)
    assert not set(fixed.values()) & set(head.RAY_RESERVED_PORTS)  # Ray's client and worker ports
