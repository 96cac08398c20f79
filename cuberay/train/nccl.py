"""NCCL over RDMA: what a node's NICs are (from sysfs) and the NCCL environment a worker on it gets.

Discovery reads what ``show_gids`` reads: for every ``/sys/class/infiniband/<dev>/ports/<port>``
its ``link_layer`` (``InfiniBand`` or ``Ethernet``), ``state`` (``4: ACTIVE``) and GID table
(``gids/<i>``, ``gid_attrs/types/<i>``, ``gid_attrs/ndevs/<i>``). The root is a parameter so
tests build trees of their own.

Choices, and why:

- **Fabric.** A node with active InfiniBand ports is ``ib``; otherwise one with usable RoCE v2
  ports is ``roce``; otherwise it has no RDMA. A mixed node uses InfiniBand (native verbs, no
  lossless-Ethernet tuning to get wrong) unless the job asked for ``roce``.
- **Data NICs only** (``NCCL_IB_HCA``). Ports that are down are skipped. A RoCE port counts only
  with a RoCE v2 GID holding an IPv4-mapped address (``::ffff:a.b.c.d``): without one it cannot
  route RoCE v2. The management NIC, the netdev carrying the node's own IP (the one Ray and NCCL's
  bootstrap use), is left out when other data ports exist. Names are exact (``=mlx5_0:1``), so
  ``mlx5_1`` does not also select ``mlx5_10``.
- **GID index** (``NCCL_IB_GID_INDEX``, RoCE only). NCCL uses one index for every HCA, so it is
  the index of the IPv4-mapped RoCE v2 GID shared by most chosen ports (the lowest on a tie).
  InfiniBand routes by LID and needs none.
- **Socket interface** (``NCCL_SOCKET_IFNAME``): the interface holding the node IP, where
  ``MASTER_ADDR`` points, so bootstrap reaches every rank; ``=`` makes the name exact.
- Each name yields to the spec's ``env``: a user who knows the fabric better wins.

Pure: no Ray import; the only I/O is reading the sysfs tree it is pointed at.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

SYSFS_ROOT = "/sys/class/infiniband"
IB, ROCE = "ib", "roce"
# Fixed tuning for RDMA jobs: 22 = 4.096 us * 2^22 ≈ 17 s before an IB retry (NCCL's default 20 is
# too short under congestion); 8 QPs per connection spread traffic over ECMP paths.
RDMA_TUNING = {"NCCL_IB_TIMEOUT": "22", "NCCL_IB_QPS_PER_CONNECTION": "8"}
NCCL_NAMES = ("NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME",
              "NCCL_IB_TIMEOUT", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_DEBUG")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str          # "fe80:0000:...", as sysfs writes it
    type: str         # "IB/RoCE v1" or "RoCE v2"
    ndev: str | None  # the netdev of a RoCE GID, None on InfiniBand

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), else None."""
        try:
            mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        except ValueError:
            return None
        return str(mapped) if mapped else None


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: int
    link_layer: str   # "InfiniBand" or "Ethernet"
    state: str        # "ACTIVE", "DOWN", ...
    gids: tuple[Gid, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def fabric(self) -> str | None:
        if self.link_layer == "InfiniBand":
            return IB
        if self.link_layer == "Ethernet" and self.roce_v2_gid() is not None:
            return ROCE
        return None

    def roce_v2_gid(self) -> Gid | None:
        """The lowest-index RoCE v2 GID with an IPv4-mapped address."""
        return next((g for g in self.gids if g.type.lower() == "roce v2" and g.ipv4), None)

    @property
    def netdev(self) -> str | None:
        gid = self.roce_v2_gid()
        return gid.ndev if gid else next((g.ndev for g in self.gids if g.ndev), None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # sysfs answers EINVAL for unused GID slots
        return None


def discover(root: str | Path = SYSFS_ROOT) -> list[RdmaPort]:
    """Every RDMA port under ``root`` (``/sys/class/infiniband``), with its non-empty GIDs; [] if none."""
    base = Path(root)
    if not base.is_dir():
        return []
    ports = []
    for dev in sorted(p for p in base.iterdir() if (p / "ports").is_dir()):
        for port_dir in sorted((dev / "ports").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            if not port_dir.name.isdigit():
                continue
            state = _read(port_dir / "state") or ""
            ports.append(RdmaPort(dev.name, int(port_dir.name), _read(port_dir / "link_layer") or "",
                                  state.split(":", 1)[-1].strip(), tuple(_gids(port_dir))))
    return ports


def _gids(port_dir: Path) -> Iterable[Gid]:
    gid_dir = port_dir / "gids"
    if not gid_dir.is_dir():
        return
    for entry in sorted(gid_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        gid = _read(entry)
        if not entry.name.isdigit() or not gid or gid == _ZERO_GID:
            continue
        i = entry.name
        yield Gid(int(i), gid, _read(port_dir / "gid_attrs" / "types" / i) or "",
                  _read(port_dir / "gid_attrs" / "ndevs" / i) or None)


# ---------------------------------------------------------------- choices


def node_fabric(ports: Iterable[RdmaPort]) -> str | None:
    """``ib``, ``roce`` or None for a node: InfiniBand wins on a mixed node."""
    fabrics = {p.fabric for p in ports if p.active}
    return IB if IB in fabrics else ROCE if ROCE in fabrics else None


def data_ports(ports: Iterable[RdmaPort], fabric: str | None = None,
               management_ifname: str | None = None) -> list[RdmaPort]:
    """The active ports of ``fabric`` (default: the node's) NCCL should use, management NIC left out."""
    ports = list(ports)
    fabric = fabric or node_fabric(ports)
    chosen = [p for p in ports if p.active and p.fabric == fabric] if fabric else []
    if management_ifname:
        data = [p for p in chosen if p.netdev != management_ifname]
        chosen = data or chosen  # a node whose only RDMA port carries its IP still uses it
    return chosen


def gid_index(ports: Iterable[RdmaPort]) -> int | None:
    """The RoCE v2 IPv4-mapped GID index most chosen ports share (lowest on a tie); None for InfiniBand."""
    counts = Counter(g.index for p in ports if p.fabric == ROCE and (g := p.roce_v2_gid()))
    if not counts:
        return None
    return min(counts, key=lambda i: (-counts[i], i))


def rdma_domain(ports: Iterable[RdmaPort]) -> str | None:
    """A label value naming the fabric a node's data ports are on, so one job's gang can stay inside it.

    InfiniBand: the subnet prefix of GID 0 (set by the subnet manager, one per fabric). RoCE: the /24 of
    the first data port's IPv4 address. ``cuberay node start --rdma-domain`` overrides it.
    """
    ports = list(ports)
    if not ports:
        return None
    first = ports[0]
    if first.fabric == IB:
        gid = next((g for g in first.gids if g.index == 0), None)
        if gid is None:
            return None
        return "ib-" + "-".join(part.lstrip("0") or "0" for part in gid.gid.split(":")[:4])
    v2 = first.roce_v2_gid()
    if v2 is None or v2.ipv4 is None:
        return None
    net = ipaddress.IPv4Network(f"{v2.ipv4}/24", strict=False)
    return f"roce-{net.network_address}-24"


def nccl_env(ports: Iterable[RdmaPort], *, use_rdma: bool, fabric: str | None = None,
             socket_ifname: str | None = None, user_env: Mapping[str, str] | None = None,
             debug: str = "INFO") -> dict[str, str]:
    """NCCL's environment for one worker on a node with ``ports``; the spec's ``user_env`` wins name by name.

    ``use_rdma``: the job asked for RDMA (``rdma: "1(roce)"``); ``fabric``: which one, if it said.
    Without RDMA (asked for or found) NCCL uses sockets: ``NCCL_IB_DISABLE=1``.
    """
    env: dict[str, str] = {"NCCL_DEBUG": debug}
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = f"={socket_ifname}"
    chosen = data_ports(ports, fabric, socket_ifname) if use_rdma else []
    if not chosen:
        env["NCCL_IB_DISABLE"] = "1"
    else:
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = "=" + ",".join(p.name for p in chosen)
        index = gid_index(chosen)
        if index is not None:
            env["NCCL_IB_GID_INDEX"] = str(index)
        env.update(RDMA_TUNING)
    user = {k: v for k, v in (user_env or {}).items() if k.startswith("NCCL_")}
    return {**env, **user}


# ---------------------------------------------------------------- this node


def interface_of(ip: str, addresses: Mapping[str, Iterable[str]] | None = None) -> str | None:
    """The network interface holding ``ip``; ``addresses`` maps interface -> its IPs (default: psutil's)."""
    if addresses is None:
        import socket

        import psutil

        addresses = {name: [a.address for a in addrs if a.family == socket.AF_INET]
                     for name, addrs in psutil.net_if_addrs().items()}
    return next((name for name, ips in addresses.items() if ip in ips), None)


def worker_nccl_env(node_ip: str, *, rdma_fabric: str | None, use_rdma: bool,
                    user_env: Mapping[str, str] | None = None, root: str | Path = SYSFS_ROOT) -> dict[str, str]:
    """:func:`nccl_env` for the node this process runs on."""
    return nccl_env(discover(root), use_rdma=use_rdma, fabric=rdma_fabric if rdma_fabric in (IB, ROCE) else None,
                    socket_ifname=interface_of(node_ip), user_env=user_env)


# ---------------------------------------------------------------- what NCCL chose

# "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>"
# "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"
_USING = re.compile(r"NCCL INFO NET/(?P<net>IB|Socket|\w+)\s*:\s*Using\s+(?P<devs>[^;]*)")
# "NCCL INFO Using network IB" (the plugin NCCL settled on)
_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>\S+)")


def parse_transport(lines: Iterable[str]) -> str | None:
    """The transport NCCL reports choosing, e.g. ``IB (mlx5_0:1/RoCE, mlx5_1:1/RoCE)`` or ``Socket (eth0)``."""
    devices: dict[str, str] = {}
    network = None
    for line in lines:
        if m := _USING.search(line):
            devs = re.findall(r"\[\d+\](\S+)", m["devs"])
            if m["net"] == "Socket":
                devs = [d.split(":", 1)[0] for d in devs]
            devices[m["net"]] = ", ".join(devs)
        elif m := _NETWORK.search(line):
            network = m["net"]
    if network is None and not devices:
        return None
    network = network or ("IB" if "IB" in devices else next(iter(devices)))
    found = devices.get(network)
    return f"{network} ({found})" if found else network
