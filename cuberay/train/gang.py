"""Command gangs: one placement group, one actor per bundle, ``bash -c command`` in each.

This is CubeStudio's Volcano/PyTorchJob template on Ray: every worker runs the
same shell command with the rank/world/master names set (:mod:`cuberay.runtime.env`),
all-or-nothing (one placement group reserves every bundle before any command
starts), each bundle pinned to the node the admission decided
(``bundle_label_selector`` on ``ray.io/node-id``). Output is streamed into the
driver's stdout line by line with a ``[worker i]`` prefix, so it lands in the Ray
Job log while the job runs. The first worker to fail stops the gang.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import IO, Mapping

import ray
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cuberay.runtime.env import JobIdentity, compose_env, worker_env
from cuberay.runtime.process import KILL_GRACE_S, POLL_S, CommandProcess
from cuberay.train import nccl, usage

EXIT_TIMEOUT = 124  # what coreutils' `timeout` returns; CubeStudio users know it
EXIT_WORKER_LOST = 1  # an actor died under its command (node lost, OOM-killed)
EXIT_CANNOT_START = 126  # bash's "cannot execute": e.g. the working_dir is missing on a node
PROGRESS_S = 10.0  # how often the driver says it is still waiting for the reservation

@ray.remote(max_concurrency=2)  # a stop must not queue behind a blocking poll
class GangWorker:
    """One gang member: runs in its bundle, owns one :class:`CommandProcess`."""

    def __init__(self) -> None:
        self._proc: CommandProcess | None = None
        self._sampler: usage.PeakSampler | None = None

    def node(self) -> tuple[str, str]:
        """(Ray node id, node IP) of the node Ray placed this worker on."""
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def nccl_env(self, use_rdma: bool, fabric: str | None, user: dict[str, str]) -> dict[str, str]:
        """NCCL's environment from this node's own NICs (each node may differ)."""
        return nccl.worker_nccl_env(ray.util.get_node_ip_address(), rdma_fabric=fabric, use_rdma=use_rdma,
                                    user_env=user)

    def free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def start(self, command: str, worker: dict[str, str], user: dict[str, str],
              cwd: str | None) -> int:
        env = compose_env(worker, base=os.environ, user=user)
        self._proc = CommandProcess(command, env, cwd)
        self._sampler = usage.PeakSampler(self._proc.pid).start()
        return self._proc.pid

    def peaks(self) -> tuple[float, float]:
        """(peak cores, peak GiB) of the command's processes so far."""
        return self._sampler.stop() if self._sampler else (0.0, 0.0)

    def poll(self, wait_s: float) -> tuple[list[str], int | None]:
        assert self._proc is not None, "poll() before start()"
        return self._proc.poll(wait_s)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()


def run_command_gang(command: str, *, node_ids: list[str], bundle: dict[str, float],
                     env: dict[str, str], job: JobIdentity, working_dir: str | None = None,
                     timeout_s: float | None = None, out: IO[str] | None = None,
                     rdma_fabric: str | None = None) -> int:
    """Run ``command`` on one worker per node of ``node_ids``; return the gang's exit code.

    0 when every worker exits 0; the first non-zero exit code otherwise (the
    others are killed); 124 on timeout (reservation included); 126 if a worker
    cannot start the command; 1 if a worker's actor dies. The placement group is
    always removed. Output goes to ``out`` (default: ``sys.stdout`` at call time,
    which is the Ray Job log when this runs in a job driver).
    """
    out = sys.stdout if out is None else out
    if not node_ids:
        raise ValueError("run_command_gang needs at least one node id (one per worker)")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pg = _reserve(node_ids, bundle)
    workers: list[ray.actor.ActorHandle] = []
    try:
        if not _wait_ready(pg, len(node_ids), deadline, out):
            return _say(out, EXIT_TIMEOUT, f"gang: timed out after {timeout_s}s waiting for "
                        f"the reservation; giving up")
        workers = [_spawn(pg, i, bundle) for i in range(len(node_ids))]
        envs = _worker_envs(workers, bundle, job, env, rdma_fabric)
        try:
            ray.get([w.start.remote(command, e, dict(env), working_dir)
                     for w, e in zip(workers, envs)])
        except ray.exceptions.RayTaskError as err:
            return _say(out, EXIT_CANNOT_START, f"gang: a worker could not start the command: "
                        f"{err.cause!r}; check working_dir {working_dir!r} exists on every node")
        _say(out, 0, f"gang: started {len(workers)} workers, MASTER={envs[0]['MASTER_ADDR']}:"
             f"{envs[0]['MASTER_PORT']}")
        code = _stream(workers, deadline, out)
        if code == 0:
            _report_usage(workers, job)
        return code
    finally:
        _teardown(workers, pg)


def _usable(bundle: Mapping[str, float]) -> dict[str, float]:
    resources = {k: float(v) for k, v in bundle.items() if v > 0}
    if not resources:
        raise ValueError(f"bundle {dict(bundle)} asks for nothing; give e.g. {{'CPU': 1}}")
    return resources


def _reserve(node_ids: list[str], bundle: Mapping[str, float]) -> PlacementGroup:
    # PACK is only a tie-breaker here: every bundle is pinned to its node by label.
    return placement_group(
        [_usable(bundle)] * len(node_ids), strategy="PACK",
        bundle_label_selector=[{"ray.io/node-id": node_id} for node_id in node_ids],
    )


def _wait_ready(pg: PlacementGroup, n: int, deadline: float | None, out: IO[str]) -> bool:
    started, ready_ref = time.monotonic(), pg.ready()
    while True:
        wait_s = PROGRESS_S if deadline is None else min(PROGRESS_S, deadline - time.monotonic())
        if wait_s <= 0:
            return False
        done, _ = ray.wait([ready_ref], timeout=wait_s)
        if done:
            placed = placement_group_table(pg).get("bundles_to_node_id", {})
            _say(out, 0, f"gang: reserved {n} bundles on nodes {[placed.get(i) for i in range(n)]}")
            return True
        _say(out, 0, f"gang: waiting for {n} bundles ({time.monotonic() - started:.0f}s)")


def _spawn(pg: PlacementGroup, index: int, bundle: Mapping[str, float]) -> ray.actor.ActorHandle:
    """A worker that holds exactly its bundle's resources, so nothing else fits in it."""
    resources = _usable(bundle)
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    strategy = PlacementGroupSchedulingStrategy(placement_group=pg,
                                                placement_group_bundle_index=index)
    return GangWorker.options(
        num_cpus=resources.get("CPU", 0), num_gpus=resources.get("GPU", 0),
        memory=int(resources["memory"]) if "memory" in resources else None,
        resources=custom, scheduling_strategy=strategy,
    ).remote()


def _worker_envs(workers: list[ray.actor.ActorHandle], bundle: Mapping[str, float], job: JobIdentity,
                 user: Mapping[str, str] | None = None, rdma_fabric: str | None = None) -> list[dict[str, str]]:
    """Rank i's env; MASTER is rank 0's node IP and a port free there; NCCL's from each worker's node."""
    nodes = ray.get([w.node.remote() for w in workers])
    port = ray.get(workers[0].free_port.remote())
    use_rdma = float(bundle.get("rdma", 0)) > 0
    nccls = ray.get([w.nccl_env.remote(use_rdma, rdma_fabric, dict(user or {})) for w in workers])
    hosts = [ip for _, ip in nodes]
    return [
        {**nccl_names, **worker_env(rank=i, world_size=len(workers), master_addr=hosts[0], master_port=port,
                                    hosts=hosts, gpus_per_worker=float(bundle.get("GPU", 0)), job=job,
                                    node_id=node_id)}
        for i, ((node_id, _), nccl_names) in enumerate(zip(nodes, nccls))
    ]


def _stream(workers: list[ray.actor.ActorHandle], deadline: float | None, out: IO[str]) -> int:
    """Relay output until all exit 0, one fails, or time runs out."""
    pending = {w.poll.remote(POLL_S): i for i, w in enumerate(workers)}
    transport: str | None = None
    while pending:
        wait_s = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
        if wait_s <= 0:
            return _say(out, EXIT_TIMEOUT, "gang: timed out; stopping every worker")
        done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
        for ref in done:
            rank = pending.pop(ref)
            try:
                lines, code = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                return _say(out, EXIT_WORKER_LOST, f"gang: worker {rank} was lost ({err}); "
                            f"stopping the gang")
            for line in lines:
                out.write(f"[worker {rank}] {line}\n")
            if transport is None and (transport := nccl.parse_transport(lines)):
                out.write(f"gang: NCCL transport: {transport}\n")
            out.flush()
            if code is None:
                pending[workers[rank].poll.remote(POLL_S)] = rank
            elif code != 0:
                return _say(out, code, f"gang: worker {rank} exited with code {code}; "
                            f"stopping the gang")
    return _say(out, 0, f"gang: all {len(workers)} workers exited 0")


def _report_usage(workers: list[ray.actor.ActorHandle], job: JobIdentity) -> None:
    try:
        peaks = ray.get([w.peaks.remote() for w in workers], timeout=30)
    except (ray.exceptions.RayError, TimeoutError):
        return
    for rank, (cpu, memory_gib) in enumerate(peaks):
        usage.report(job.job_id, rank, cpu, memory_gib)


def _teardown(workers: list[ray.actor.ActorHandle], pg: PlacementGroup) -> None:
    try:
        ray.get([w.stop.remote() for w in workers], timeout=2 * KILL_GRACE_S + 5)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # a dead actor's watchdog already killed its command
    for worker in workers:
        ray.kill(worker)
    remove_placement_group(pg)


def _say(out: IO[str], code: int, message: str) -> int:
    out.write(message + "\n")
    out.flush()
    return code
