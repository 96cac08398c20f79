"""`cuberay node start`: RDMA facts from sysfs become ray start's resource and labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuberay.cli import main
from cuberay.cli.node_cmd import NodeRdma, discover_rdma, ray_start_args, resolve
from cuberay.errors import SpecError
from tests.unit.test_nccl import ib_port, roce_port


def test_roce_node_registers_its_data_ports(tmp_path: Path) -> None:
    roce_port(tmp_path, "mlx5_0", "eth0", "192.168.0.5")
    roce_port(tmp_path, "mlx5_1", "ens1f0", "10.10.1.5")
    roce_port(tmp_path, "mlx5_2", "ens1f1", "10.10.2.5")
    found = discover_rdma(str(tmp_path), management_ifname="eth0")
    assert found == NodeRdma("roce", 2, "roce-10.10.1.0-24")
    assert ray_start_args(found, ["--address", "h:6379"]) == [
        "start", "--address", "h:6379", '--resources={"rdma": 2}',
        "--labels=cuberay.io/rdma=roce,cuberay.io/rdma-domain=roce-10.10.1.0-24"]


def test_user_resources_and_labels_are_merged(tmp_path: Path) -> None:
    args = ray_start_args(NodeRdma("ib", 4, "ib-fe80-0-0-0"),
                          ["--head", "--resources", '{"disk": 1}', "--labels=zone=a,cuberay.io/rdma-domain=pod7"])
    assert args[:2] == ["start", "--head"]
    assert json.loads(args[2].split("=", 1)[1]) == {"disk": 1, "rdma": 4}
    assert args[3] == "--labels=cuberay.io/rdma=ib,cuberay.io/rdma-domain=pod7,zone=a"


def test_overrides_and_no_rdma(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0")
    found = discover_rdma(str(tmp_path))
    assert resolve(found, fabric=None, count=None, domain="rack3") == NodeRdma("ib", 1, "rack3")
    assert resolve(found, fabric="none", count=None, domain=None) == NodeRdma(None, 0, None)
    assert ray_start_args(NodeRdma(None, 0, None), ["--head"]) == ["start", "--head"]
    assert resolve(discover_rdma(str(tmp_path / "none")), fabric="roce", count=2, domain=None) \
        == NodeRdma("roce", 2, None)
    with pytest.raises(SpecError, match="ib, roce or none"):
        resolve(found, fabric="ethernet", count=None, domain=None)


def test_cli_dry_run_prints_the_ray_start_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ib_port(tmp_path, "mlx5_0")
    ib_port(tmp_path, "mlx5_1")
    code = main(["node", "start", "--sysfs", str(tmp_path), "--rdma-domain", "fab1", "--dry-run", "--",
                 "--address", "head:6379", "--num-cpus", "8"])
    assert code == 0
    out = capsys.readouterr().out.strip()
    assert out == ("ray start --address head:6379 --num-cpus 8 '--resources={\"rdma\": 2}' "
                   "--labels=cuberay.io/rdma=ib,cuberay.io/rdma-domain=fab1")
