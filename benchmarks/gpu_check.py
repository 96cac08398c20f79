"""A training step on a real CUDA GPU with the NCCL environment cuberay composes on that node (torch only).

For a GPU machine without Ray: it runs what a cuberay worker would do there apart from
Ray itself — discover the node's RDMA NICs from sysfs (``cuberay.train.nccl``), compose
NCCL's environment, join a one-rank NCCL process group with it, train the digits-shaped
MLP under DistributedDataParallel for a few hundred steps (fp32 and bf16 autocast), and
report what NCCL chose. Run: ``python benchmarks/gpu_check.py [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuberay.train import nccl  # noqa: E402  (pure: no Ray)


def _addresses() -> dict[str, list[str]]:
    """Interface -> IPv4 addresses, from psutil when present, else ``ip -4 -o addr``."""
    try:
        import psutil

        return {n: [a.address for a in addrs if a.family == socket.AF_INET]
                for n, addrs in psutil.net_if_addrs().items()}
    except ImportError:
        out: dict[str, list[str]] = {}
        text = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        for line in text.splitlines():
            parts = line.split()
            out.setdefault(parts[1], []).append(parts[3].split("/")[0])
        return out


def _node_ip(addresses: dict[str, list[str]]) -> str:
    """The first non-loopback IPv4 address (what Ray would advertise on a one-NIC node)."""
    for name, ips in addresses.items():
        for ip in ips:
            if not ip.startswith("127."):
                return ip
    return "127.0.0.1"


def _train(steps: int, bf16: bool) -> dict:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = DistributedDataParallel(model.to(device), device_ids=[0])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    x = torch.randn(4096, 64, device=device)
    y = (x[:, :10].argmax(dim=1)).to(device)  # a learnable rule: the largest of the first ten inputs
    loss = None
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    with torch.no_grad():
        accuracy = float((ddp(x).argmax(dim=1) == y).float().mean())
    probe = torch.tensor([1.0], device=device)
    dist.all_reduce(probe)
    return {"bf16": bf16, "steps": steps, "ms_per_step": round(elapsed / steps * 1000, 3),
            "final_loss": round(float(loss.detach()), 4), "train_accuracy": round(accuracy, 4),
            "allreduce_ok": float(probe) == 1.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the result as JSON here")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    assert torch.cuda.is_available(), "no CUDA device visible to torch"
    ports = nccl.discover()
    addresses = _addresses()
    ip = _node_ip(addresses)
    ifname = nccl.interface_of(ip, addresses)
    env = nccl.nccl_env(ports, use_rdma=True, socket_ifname=ifname)
    log = Path(tempfile.mkdtemp()) / "nccl.log"
    os.environ.update(env)
    os.environ.update({"NCCL_DEBUG_FILE": str(log), "MASTER_ADDR": ip, "MASTER_PORT": "29531",
                       "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    try:
        runs = [_train(args.steps, bf16=False), _train(args.steps, bf16=True)]
    finally:
        dist.destroy_process_group()
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    result = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "rdma_ports": [{"name": p.name, "link_layer": p.link_layer, "active": p.active} for p in ports],
        "fabric": nccl.node_fabric(ports), "node_ip": ip, "socket_ifname": ifname, "nccl_env": env,
        "nccl_transport": nccl.parse_transport(lines), "nccl_log_lines": len(lines), "runs": runs,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    ok = all(r["allreduce_ok"] and r["train_accuracy"] > 0.9 for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
