"""RDMA discovery from sysfs trees built here, and the exact NCCL environment each gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.train import nccl

LINK_LOCAL = "fe80:0000:0000:0000:0202:c9ff:fe00:0001"


def v4_gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def add_port(root: Path, dev: str, port: int, *, link: str, state: str = "4: ACTIVE",
             gids: list[tuple[str, str, str | None]] = ()) -> None:
    """One port of ``dev`` with GIDs (gid, type, ndev) at indexes 0.., plus an empty slot sysfs leaves."""
    p = root / dev / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (p / sub).mkdir(parents=True, exist_ok=True)
    (p / "link_layer").write_text(link + "\n")
    (p / "state").write_text(state + "\n")
    for i, (gid, kind, ndev) in enumerate(list(gids) + [("0000:0000:0000:0000:0000:0000:0000:0000", "", None)]):
        (p / "gids" / str(i)).write_text(gid + "\n")
        (p / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
        if ndev:
            (p / "gid_attrs" / "ndevs" / str(i)).write_text(ndev + "\n")


def roce_port(root: Path, dev: str, ndev: str, ip: str, state: str = "4: ACTIVE") -> None:
    # The usual mlx5 table: 0/1 link-local v1/v2, 2/3 IPv4-mapped v1/v2.
    add_port(root, dev, 1, link="Ethernet", state=state, gids=[
        (LINK_LOCAL, "IB/RoCE v1", ndev), (LINK_LOCAL, "RoCE v2", ndev),
        (v4_gid(ip), "IB/RoCE v1", ndev), (v4_gid(ip), "RoCE v2", ndev)])


def ib_port(root: Path, dev: str, state: str = "4: ACTIVE") -> None:
    add_port(root, dev, 1, link="InfiniBand", state=state, gids=[(LINK_LOCAL, "IB/RoCE v1", None)])


def env_for(root: Path, *, use_rdma: bool = True, fabric: str | None = None, mgmt: str | None = "eth0",
            user: dict | None = None) -> dict[str, str]:
    return nccl.nccl_env(nccl.discover(root), use_rdma=use_rdma, fabric=fabric, socket_ifname=mgmt,
                         user_env=user)


def test_infiniband_node(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0")
    ib_port(tmp_path, "mlx5_1")
    assert env_for(tmp_path) == {
        "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_TIMEOUT": "22", "NCCL_IB_QPS_PER_CONNECTION": "8"}
    ports = nccl.discover(tmp_path)
    assert nccl.node_fabric(ports) == "ib"
    assert nccl.rdma_domain(nccl.data_ports(ports)) == "ib-fe80-0-0-0"


def test_roce_v2_node_leaves_out_the_management_nic(tmp_path: Path) -> None:
    roce_port(tmp_path, "mlx5_0", "eth0", "192.168.0.5")       # management: carries the node IP
    roce_port(tmp_path, "mlx5_1", "ens1f0", "10.10.1.5")
    roce_port(tmp_path, "mlx5_2", "ens1f1", "10.10.2.5")
    assert env_for(tmp_path) == {
        "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=mlx5_1:1,mlx5_2:1", "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_TIMEOUT": "22", "NCCL_IB_QPS_PER_CONNECTION": "8"}
    ports = nccl.discover(tmp_path)
    assert nccl.node_fabric(ports) == "roce"
    assert nccl.rdma_domain(nccl.data_ports(ports, management_ifname="eth0")) == "roce-10.10.1.0-24"


def test_single_roce_nic_that_also_carries_the_node_ip_is_used(tmp_path: Path) -> None:
    roce_port(tmp_path, "mlx5_0", "bond0", "10.0.0.7")
    env = env_for(tmp_path, mgmt="bond0")
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1" and env["NCCL_IB_GID_INDEX"] == "3"


def test_roce_port_without_an_ipv4_v2_gid_is_not_rdma(tmp_path: Path) -> None:
    add_port(tmp_path, "mlx5_0", 1, link="Ethernet", gids=[(LINK_LOCAL, "RoCE v2", "eth1")])
    assert nccl.node_fabric(nccl.discover(tmp_path)) is None
    assert env_for(tmp_path)["NCCL_IB_DISABLE"] == "1"


def test_mixed_node_prefers_ib_unless_roce_asked(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0")
    roce_port(tmp_path, "mlx5_1", "ens2", "10.1.0.3")
    ports = nccl.discover(tmp_path)
    assert nccl.node_fabric(ports) == "ib"
    ib = env_for(tmp_path)
    assert ib["NCCL_IB_HCA"] == "=mlx5_0:1" and "NCCL_IB_GID_INDEX" not in ib
    roce = env_for(tmp_path, fabric="roce")
    assert roce["NCCL_IB_HCA"] == "=mlx5_1:1" and roce["NCCL_IB_GID_INDEX"] == "3"


def test_no_rdma_devices(tmp_path: Path) -> None:
    assert nccl.discover(tmp_path / "absent") == []
    assert env_for(tmp_path / "absent") == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=eth0",
                                            "NCCL_IB_DISABLE": "1"}


def test_port_down_is_skipped(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", state="1: DOWN")
    ib_port(tmp_path, "mlx5_1")
    assert env_for(tmp_path)["NCCL_IB_HCA"] == "=mlx5_1:1"
    ib_port(tmp_path, "mlx5_1", state="1: DOWN")
    assert env_for(tmp_path)["NCCL_IB_DISABLE"] == "1"
    assert nccl.node_fabric(nccl.discover(tmp_path)) is None


def test_job_without_rdma_disables_ib_even_on_an_rdma_node(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0")
    assert env_for(tmp_path, use_rdma=False) == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=eth0",
                                                 "NCCL_IB_DISABLE": "1"}


def test_spec_env_overrides_each_name(tmp_path: Path) -> None:
    roce_port(tmp_path, "mlx5_1", "ens1f0", "10.10.1.5")
    user = {"NCCL_IB_GID_INDEX": "5", "NCCL_IB_TIMEOUT": "18", "NCCL_DEBUG": "WARN", "OTHER": "x"}
    env = env_for(tmp_path, user=user)
    assert env["NCCL_IB_GID_INDEX"] == "5" and env["NCCL_IB_TIMEOUT"] == "18" and env["NCCL_DEBUG"] == "WARN"
    assert "OTHER" not in env and env["NCCL_IB_HCA"] == "=mlx5_1:1"


def test_gid_index_is_the_one_most_ports_share() -> None:
    def port(name: str, index: int) -> nccl.RdmaPort:
        return nccl.RdmaPort(name, 1, "Ethernet", "ACTIVE",
                             (nccl.Gid(index, "::ffff:10.0.0.1", "RoCE v2", "e"),))
    assert nccl.gid_index([port("a", 3), port("b", 5), port("c", 5)]) == 5
    assert nccl.gid_index([port("a", 5), port("b", 3)]) == 3


def test_interface_of_node_ip() -> None:
    addrs = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.4"], "ib0": ["10.1.0.4"]}
    assert nccl.interface_of("10.0.0.4", addrs) == "eth0"
    assert nccl.interface_of("1.2.3.4", addrs) is None


@pytest.mark.parametrize("lines, expected", [
    (["host:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_2:1/RoCE ; OOB eth0:10.0.0.1<0>",
      "host:1:1 [0] NCCL INFO Using network IB"], "IB (mlx5_1:1/RoCE, mlx5_2:1/RoCE)"),
    (["NCCL INFO NET/IB : No device found.", "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
      "NCCL INFO Using network Socket"], "Socket (eth0)"),
    (["NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"], "Socket (eth0)"),
    (["epoch 1 loss 0.3"], None),
])
def test_parse_transport(lines: list[str], expected: str | None) -> None:
    assert nccl.parse_transport(lines) == expected
