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
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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

from cuberay.runtime.env import TOPOLOGY_NAMES, JobIdentity, compose_env, worker_env
from cuberay.runtime.process import KILL_GRACE_S, POLL_S, CommandProcess
from cuberay.train import mpi, nccl, usage

EXIT_TIMEOUT = 124  # what coreutils' `timeout` returns; CubeStudio users know it
EXIT_WORKER_LOST = 1  # an actor died under its command (node lost, OOM-killed)
EXIT_CANNOT_START = 126  # bash's "cannot execute": e.g. the working_dir is missing on a node
PROGRESS_S = 10.0  # how often the driver says it is still waiting for the reservation

@ray.remote(max_concurrency=4)  # a stop must not queue behind a blocking poll or an MPI daemon's launch
class GangWorker:
    """One gang member: runs in its bundle, owns one :class:`CommandProcess` (and, under MPI, the daemons
    mpirun starts through it)."""

    def __init__(self, name: str = "") -> None:
        self._name = name
        self._proc: CommandProcess | None = None
        self._sampler: usage.PeakSampler | None = None
        self._env: dict[str, str] = {}
        self._cwd: str | None = None
        self._launched: list[subprocess.Popen] = []
        self._scratches: list[str] = []
        self._stopped = False

    def node(self) -> tuple[str, str, str, bool]:
        """(Ray node id, node IP, hostname, runs as root) of the node Ray placed this worker on."""
        return (ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), socket.gethostname(),
                os.geteuid() == 0)

    def nccl_env(self, use_rdma: bool, fabric: str | None, user: dict[str, str]) -> dict[str, str]:
        """NCCL's environment from this node's own NICs (each node may differ)."""
        return nccl.worker_nccl_env(ray.util.get_node_ip_address(), rdma_fabric=fabric, use_rdma=use_rdma,
                                    user_env=user)

    def free_ports(self, n: int) -> list[int]:
        """``n`` distinct ports free on this node (held together while chosen, so they differ)."""
        socks = [socket.socket() for _ in range(n)]
        try:
            for sock in socks:
                sock.bind(("", 0))
            return [int(sock.getsockname()[1]) for sock in socks]
        finally:
            for sock in socks:
                sock.close()

    def hold(self, worker: dict[str, str], user: dict[str, str], cwd: str | None) -> None:
        """Keep this worker's environment for commands started in it later (MPI's daemons)."""
        self._env, self._cwd = compose_env(worker, base=os.environ, user=user), cwd

    def start(self, command: str, worker: dict[str, str], user: dict[str, str],
              cwd: str | None) -> int:
        self.hold(worker, user, cwd)
        self._proc = CommandProcess(command, self._env, cwd)
        self._sampler = usage.PeakSampler(self._proc.pid).start()
        return self._proc.pid

    def prepare_mpi(self, hosts: list[str], slots: int) -> tuple[str, str, str]:
        """(hostfile, agent, Ray address) for mpirun on this worker's node; files removed at stop()."""
        scratch = tempfile.mkdtemp(prefix="cuberay-mpi-")
        self._scratches.append(scratch)
        hostfile_path, agent_path = mpi.write_launcher_files(scratch, hosts=hosts, slots=slots,
                                                             python=sys.executable)
        return hostfile_path, agent_path, ray.get_runtime_context().gcs_address

    def launch(self, command: str) -> int:
        """Run ``bash -c command`` here as sshd would for mpirun's agent; block until it exits."""
        if self._stopped:
            return 255  # the gang is stopping: ssh's code for a host that cannot be reached
        # Its own session directory: daemons of one job on one machine (Ray nodes sharing a hostname)
        # would otherwise race on the same /tmp/ompi.HOST.UID/ path.
        scratch = tempfile.mkdtemp(prefix="cuberay-orted-")
        self._scratches.append(scratch)
        # No gang rank names: under mpirun a process's rank is Open MPI's (OMPI_COMM_WORLD_*), and this
        # worker's RANK/WORLD_SIZE would give several ranks the same, wrong, torch.distributed identity.
        env = {k: v for k, v in self._env.items() if k not in TOPOLOGY_NAMES}
        env.update({mpi.AGENT_NAME: self._name, "OMPI_MCA_orte_tmpdir_base": scratch})
        proc = subprocess.Popen(["bash", "-c", command], env=env, cwd=self._cwd, start_new_session=True)
        self._launched.append(proc)
        return proc.wait()

    def peaks(self) -> tuple[float, float]:
        """(peak cores, peak GiB) of the command's processes so far."""
        return self._sampler.stop() if self._sampler else (0.0, 0.0)

    def poll(self, wait_s: float) -> tuple[list[str], int | None]:
        assert self._proc is not None, "poll() before start()"
        return self._proc.poll(wait_s)

    def stop(self) -> None:
        self._stopped = True
        if self._proc is not None:
            self._proc.kill()
        for proc in self._launched:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for scratch in self._scratches:
            shutil.rmtree(scratch, ignore_errors=True)


def run_command_gang(command: str, *, node_ids: list[str], bundle: dict[str, float],
                     env: dict[str, str], job: JobIdentity, working_dir: str | None = None,
                     timeout_s: float | None = None, out: IO[str] | None = None,
                     rdma_fabric: str | None = None, mpi_slots: int | None = None,
                     roles: list[tuple[str, int, dict[str, float]]] | None = None) -> int:
    """Run ``command`` on one worker per node of ``node_ids``; return the gang's exit code.

    0 when every worker exits 0; the first non-zero exit code otherwise (the
    others are killed); 124 on timeout (reservation included); 126 if a worker
    cannot start the command; 1 if a worker's actor dies. The placement group is
    always removed. Output goes to ``out`` (default: ``sys.stdout`` at call time,
    which is the Ray Job log when this runs in a job driver).

    With ``mpi_slots`` only worker 0 runs ``command`` (an ``mpirun`` line), with a
    hostfile of every worker at ``mpi_slots`` slots each; the others start mpirun's
    daemons when it asks (:mod:`cuberay.train.mpi`), and the gang ends with worker 0.

    With ``roles`` (a gang with roles: member i's TensorFlow task type, index and bundle, one per node id) each
    member reserves its own bundle and reads its task in ``TF_CONFIG``; the gang ends when its chief exits (or,
    without a chief, when every worker has), stopping the members that serve until then (parameter servers).
    """
    out = sys.stdout if out is None else out
    if not node_ids:
        raise ValueError("run_command_gang needs at least one node id (one per worker)")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    bundles = [dict(b) for _, _, b in roles] if roles else [bundle] * len(node_ids)
    tasks = [(kind, index) for kind, index, _ in roles] if roles else None
    pg = _reserve(node_ids, bundles)
    workers: list[ray.actor.ActorHandle] = []
    try:
        if not _wait_ready(pg, len(node_ids), deadline, out):
            return _say(out, EXIT_TIMEOUT, f"gang: timed out after {timeout_s}s waiting for "
                        f"the reservation; giving up")
        names = mpi.host_names(f"cuberay-{secrets.token_hex(4)}", len(node_ids)) if mpi_slots else None
        workers = [_spawn(pg, i, bundles[i], names[i] if names else None) for i in range(len(node_ids))]
        envs, nodes = _worker_envs(workers, bundles, job, env, rdma_fabric, tasks)
        try:
            if names and mpi_slots:
                watched = _start_mpi(workers, envs, nodes, names, mpi_slots, command, env, working_dir, out)
            else:
                ray.get([w.start.remote(command, e, dict(env), working_dir) for w, e in zip(workers, envs)])
                watched = workers
                _say(out, 0, f"gang: started {len(workers)} workers, MASTER={envs[0]['MASTER_ADDR']}:"
                     f"{envs[0]['MASTER_PORT']}")
        except ray.exceptions.RayTaskError as err:
            return _say(out, EXIT_CANNOT_START, f"gang: a worker could not start the command: "
                        f"{err.cause!r}; check working_dir {working_dir!r} exists on every node")
        code = _stream(watched, deadline, out, tasks)
        # Under MPI the ranks run under the daemons, outside worker 0's command: its peaks would be mpirun's
        # alone and would shrink the job's corrected request, so an MPI run reports none.
        if code == 0 and not mpi_slots:  # the workers' peaks only: a role's (a parameter server's) are its own
            _report_usage(watched if not tasks else [w for w, (kind, _) in zip(watched, tasks) if kind == "worker"],
                          job)
        return code
    finally:
        _teardown(workers, pg)


def _start_mpi(workers: list[ray.actor.ActorHandle], envs: list[dict[str, str]], nodes: list[tuple],
               names: list[str], slots: int, command: str, env: Mapping[str, str], working_dir: str | None,
               out: IO[str]) -> list[ray.actor.ActorHandle]:
    """Every worker holds its environment for mpirun's daemons; worker 0 runs ``command``. Returns [worker 0]."""
    ray.get([w.hold.remote(e, dict(env), working_dir) for w, e in zip(workers, envs)])
    hostfile_path, agent_path, address = ray.get(workers[0].prepare_mpi.remote(names, slots))
    shared = len({hostname for _, _, hostname, _ in nodes}) < len(nodes)
    launcher = {**envs[0], **mpi.launcher_env(hostfile_path=hostfile_path, agent_path=agent_path,
                                              ray_address=address, shared_hostname=shared, as_root=nodes[0][3])}
    ray.get(workers[0].start.remote(command, launcher, dict(env), working_dir))
    _say(out, 0, f"gang: MPI launcher on worker 0, hostfile {', '.join(f'{n} slots={slots}' for n in names)}")
    return workers[:1]


def _usable(bundle: Mapping[str, float]) -> dict[str, float]:
    resources = {k: float(v) for k, v in bundle.items() if v > 0}
    if not resources:
        raise ValueError(f"bundle {dict(bundle)} asks for nothing; give e.g. {{'CPU': 1}}")
    return resources


def _reserve(node_ids: list[str], bundles: list[Mapping[str, float]]) -> PlacementGroup:
    # PACK is only a tie-breaker here: every bundle is pinned to its node by label.
    return placement_group(
        [_usable(bundle) for bundle in bundles], strategy="PACK",
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


def _spawn(pg: PlacementGroup, index: int, bundle: Mapping[str, float],
           name: str | None = None) -> ray.actor.ActorHandle:
    """A worker that holds exactly its bundle's resources, so nothing else fits in it; ``name`` makes it an
    MPI host its agent can find."""
    resources = _usable(bundle)
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    strategy = PlacementGroupSchedulingStrategy(placement_group=pg,
                                                placement_group_bundle_index=index)
    return GangWorker.options(
        num_cpus=resources.get("CPU", 0), num_gpus=resources.get("GPU", 0),
        memory=int(resources["memory"]) if "memory" in resources else None,
        resources=custom, scheduling_strategy=strategy,
        name=name, namespace=mpi.NAMESPACE if name else None,
    ).remote(name or "")


def _worker_envs(workers: list[ray.actor.ActorHandle], bundles: list[Mapping[str, float]], job: JobIdentity,
                 user: Mapping[str, str] | None = None, rdma_fabric: str | None = None,
                 tasks: list[tuple[str, int]] | None = None) -> tuple[list[dict[str, str]], list[tuple]]:
    """Rank i's env and node; MASTER is rank 0's node IP and a port free there, JAX's coordinator another;
    each worker's own endpoint (TensorFlow's, Paddle's) a port free on its node; NCCL's from each node."""
    nodes = ray.get([w.node.remote() for w in workers])
    ports = ray.get([w.free_ports.remote(3 if i == 0 else 1) for i, w in enumerate(workers)])
    nccls = ray.get([w.nccl_env.remote(float(b.get("rdma", 0)) > 0, rdma_fabric, dict(user or {}))
                     for w, b in zip(workers, bundles)])
    hosts = [node[1] for node in nodes]
    endpoints = [f"{host}:{mine[-1]}" for host, mine in zip(hosts, ports)]
    master_port, coordinator_port = ports[0][0], ports[0][1]
    envs = [
        {**nccl_names, **worker_env(rank=i, world_size=len(workers), master_addr=hosts[0], master_port=master_port,
                                    hosts=hosts, gpus_per_worker=float(bundle.get("GPU", 0)), job=job,
                                    node_id=node[0], endpoints=endpoints, coordinator_port=coordinator_port,
                                    tasks=tasks)}
        for i, (node, nccl_names, bundle) in enumerate(zip(nodes, nccls, bundles))
    ]
    return envs, nodes


def _stream(workers: list[ray.actor.ActorHandle], deadline: float | None, out: IO[str],
            tasks: list[tuple[str, int]] | None = None) -> int:
    """Relay output until all exit 0 (with roles: the chief, or else every worker), one fails, or time runs out."""
    labels = [f"{kind} {index}" for kind, index in tasks] if tasks else [f"worker {i}" for i in range(len(workers))]
    ending = _ending(tasks) if tasks else set(range(len(workers)))
    pending = {w.poll.remote(POLL_S): i for i, w in enumerate(workers)}
    transport: str | None = None
    while ending:
        wait_s = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
        if wait_s <= 0:
            return _say(out, EXIT_TIMEOUT, "gang: timed out; stopping every worker")
        done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
        for ref in done:
            rank = pending.pop(ref)
            try:
                lines, code = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                return _say(out, EXIT_WORKER_LOST, f"gang: {labels[rank]} was lost ({err}); "
                            f"stopping the gang")
            for line in lines:
                out.write(f"[{labels[rank]}] {line}\n")
            if transport is None and (transport := nccl.parse_transport(lines)):
                out.write(f"gang: NCCL transport: {transport}\n")
            out.flush()
            if code is None:
                pending[workers[rank].poll.remote(POLL_S)] = rank
            elif code != 0:
                return _say(out, code, f"gang: {labels[rank]} exited with code {code}; "
                            f"stopping the gang")
            else:
                ending.discard(rank)
    if tasks:
        return _say(out, 0, f"gang: {' and '.join(labels[i] for i in _ending(tasks))} exited 0; stopping the rest")
    return _say(out, 0, f"gang: all {len(workers)} workers exited 0" if len(workers) > 1 else "gang: worker 0 exited 0")


def _ending(tasks: list[tuple[str, int]]) -> set[int]:
    """The members whose exit ends a gang with roles: its chief, or else its workers (TFJob's success policy)."""
    chief = {i for i, (kind, _) in enumerate(tasks) if kind == "chief"}
    return chief or {i for i, (kind, _) in enumerate(tasks) if kind == "worker"}


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
