"""``cuberay node start``: ``ray start`` plus what cuberay needs to know about the node's RDMA NICs.

It discovers the node's RDMA ports (:mod:`cuberay.train.nccl`) and adds the Ray resource
``rdma: <data ports>`` and the labels ``cuberay.io/rdma: ib|roce`` and ``cuberay.io/rdma-domain``
that admission and placement read (a job asking ``rdma: "1(roce)"`` needs the resource and the
label), then runs ``ray start`` with every other argument passed through unchanged. A
``--resources`` or ``--labels`` given after ``--`` is merged, its own keys winning.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional

import typer

from cuberay.cli import app
from cuberay.errors import SpecError
from cuberay.platform.policy.placement import LABEL_RDMA_DOMAIN
from cuberay.platform.spec.resources import LABEL_RDMA, RDMA
from cuberay.train import nccl

node_app = typer.Typer(help="Join this machine to a Ray cluster as a cuberay node.", no_args_is_help=True)
app.add_typer(node_app, name="node")


@dataclass(frozen=True)
class NodeRdma:
    fabric: str | None
    count: int
    domain: str | None


def discover_rdma(root: str = nccl.SYSFS_ROOT, management_ifname: str | None = None) -> NodeRdma:
    """What this node's RDMA data ports are: fabric, how many, and the domain they are in."""
    ports = nccl.discover(root)
    data = nccl.data_ports(ports, management_ifname=management_ifname)
    return NodeRdma(nccl.node_fabric(ports), len(data), nccl.rdma_domain(data))


def resolve(found: NodeRdma, *, fabric: str | None, count: int | None, domain: str | None) -> NodeRdma:
    """Discovery with the flags' overrides; ``fabric: none`` registers no RDMA at all."""
    if fabric == "none":
        return NodeRdma(None, 0, None)
    if fabric is not None and fabric not in (nccl.IB, nccl.ROCE):
        raise SpecError(f"--rdma {fabric!r} is not a fabric; use ib, roce or none")
    chosen = fabric or found.fabric
    n = found.count if count is None else count
    if n < 0:
        raise SpecError(f"--rdma-count {n} is negative; give the number of RDMA data ports (>= 0)")
    if chosen is None or n == 0:
        return NodeRdma(None, 0, None)
    return NodeRdma(chosen, n, domain or found.domain)


def registration(rdma: NodeRdma) -> tuple[dict[str, float], dict[str, str]]:
    """(Ray resources, Ray labels) a node with ``rdma`` registers: what the ledger and placement read."""
    if not rdma.fabric:
        return {}, {}
    labels = {LABEL_RDMA: rdma.fabric}
    if rdma.domain:
        labels[LABEL_RDMA_DOMAIN] = rdma.domain
    return {RDMA: float(rdma.count)}, labels


def ray_start_args(rdma: NodeRdma, extra: list[str]) -> list[str]:
    """``ray start`` arguments: ``extra`` with cuberay's resource and labels merged into theirs."""
    resources, labels = registration(rdma)
    rest: list[str] = []
    it = iter(extra)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name in ("--resources", "--labels"):
            if not eq:
                value = next(it, "")
            if name == "--resources":
                try:
                    resources.update(json.loads(value or "{}"))
                except ValueError as err:
                    raise SpecError(f"--resources {value!r} is not JSON ({err}); write e.g. "
                                    f"--resources '{{\"CustomResource\": 1}}'") from None
            else:
                labels.update(_labels(value))
            continue
        rest.append(arg)
    out = ["start", *rest]
    if resources:
        whole = {k: int(v) if float(v).is_integer() else v for k, v in resources.items()}
        out.append(f"--resources={json.dumps(whole, sort_keys=True)}")
    if labels:
        out.append("--labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    return out


def _labels(text: str) -> dict[str, str]:
    labels = {}
    for pair in filter(None, (p.strip() for p in text.strip('"').split(","))):
        key, eq, value = pair.partition("=")
        if not eq:
            raise SpecError(f"--labels item {pair!r} is not key=value; write e.g. --labels 'zone=a,rack=3'")
        labels[key.strip()] = value.strip()
    return labels


def _node_ip(extra: list[str]) -> str:
    for i, arg in enumerate(extra):
        if arg.startswith("--node-ip-address"):
            return arg.partition("=")[2] or (extra[i + 1] if i + 1 < len(extra) else "")
    from ray._private.services import get_node_ip_address

    return get_node_ip_address()


@node_app.command("start", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def start(
    ctx: typer.Context,
    rdma: Optional[str] = typer.Option(None, "--rdma", metavar="ib|roce|none",
                                       help="Fabric to register (default: discovered from sysfs)."),
    rdma_count: Optional[int] = typer.Option(None, "--rdma-count", metavar="N",
                                             help="RDMA data ports to offer (default: discovered)."),
    rdma_domain: Optional[str] = typer.Option(None, "--rdma-domain", metavar="NAME",
                                              help="cuberay.io/rdma-domain label (default: from the fabric)."),
    sysfs: str = typer.Option(nccl.SYSFS_ROOT, "--sysfs", metavar="DIR", help="Where RDMA devices are listed."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the ray start command instead of running it."),
) -> None:
    """Run `ray start ARGS...` with this node's RDMA resource and labels added (ARGS pass through after --)."""
    extra: List[str] = list(ctx.args)
    found = discover_rdma(sysfs, nccl.interface_of(_node_ip(extra)) if rdma is None else None)
    chosen = resolve(found, fabric=rdma, count=rdma_count, domain=rdma_domain)
    command = [sys.executable, "-m", "ray.scripts.scripts", *ray_start_args(chosen, extra)]
    shown = "ray " + " ".join(shlex.quote(a) for a in command[3:])
    what = (f"RDMA {chosen.fabric} x{chosen.count}, domain {chosen.domain or '-'}" if chosen.fabric
            else "no RDMA")
    typer.echo(f"cuberay node: {what}", err=True)
    if dry_run:
        typer.echo(shown)
        return
    raise typer.Exit(subprocess.call(command))
