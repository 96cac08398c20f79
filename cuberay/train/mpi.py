"""An MPI launcher inside a command gang: ``mpirun`` on worker 0, remote ranks started by the gang's own workers.

On Kubernetes the MPI operator (and Volcano's ssh plugin) give the launcher pod a hostfile and an ssh
into every worker pod. A Ray node has no sshd to offer, so cuberay does what Open MPI allows in its
place: ``OMPI_MCA_plm_rsh_agent`` names a program mpirun runs as ``AGENT HOST COMMAND...`` instead of
``ssh HOST COMMAND...``. cuberay's agent (:mod:`cuberay.train.mpi_agent`) connects to Ray, finds the
gang worker named ``HOST`` and has it run ``COMMAND`` (Open MPI's ``orted``) in that worker's bundle,
on the node admission chose. ``orted`` then starts that node's ranks, which inherit the worker's
environment (``CUBERAY_NODE_ID``, ``CUBERAY_MPI_AGENT``).

The hostfile names each worker by its gang-worker actor name, never by its node's hostname: Ray
nodes started by ``ray.cluster_utils`` on one machine share a hostname, and mpirun would start every
rank locally for a name it recognises as its own. Decisions:

- ``orte_leave_session_attached``: ``orted`` stays a child of the worker (no ``--daemonize``), so a
  stopped gang takes its daemons with it;
- ``plm_rsh_no_tree_spawn``: mpirun starts every daemon itself (a daemon would otherwise need the
  agent to start others);
- when two workers share a hostname (several Ray nodes on one machine), Open MPI's shared-memory
  transport (``vader``) would name its segments alike across them and crash; the byte transfer layers
  are then ``self,tcp`` (a soft setting: a job's ``env`` may say otherwise);
- as root, Open MPI refuses to run without ``--allow-run-as-root``; a container's root is the usual
  case (CubeStudio's template passes the flag), so the two ``OMPI_ALLOW_RUN_AS_ROOT*`` names are set
  when the worker runs as root.

Pure apart from writing the two files into a directory the caller owns.
"""

from __future__ import annotations

import os
import shlex
import stat

NAMESPACE = "cuberay-mpi"  # the Ray namespace of the gang workers' actor names
ADDRESS_NAME = "CUBERAY_MPI_RAY_ADDRESS"  # the agent's Ray address (the GCS of the gang's cluster)
AGENT_NAME = "CUBERAY_MPI_AGENT"  # set on every orted (and so every rank): the host it was started for


def host_names(prefix: str, workers: int) -> list[str]:
    """The hostfile's name for each worker, which is also its gang-worker actor's name."""
    return [f"{prefix}-w{i}" for i in range(workers)]


def hostfile(hosts: list[str], slots: int) -> str:
    """Open MPI's hostfile: one line per worker with its slots (ranks per worker)."""
    if slots < 1:
        raise ValueError(f"slots per worker must be >= 1, got {slots}")
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def launcher_env(*, hostfile_path: str, agent_path: str, ray_address: str, shared_hostname: bool,
                 as_root: bool) -> dict[str, str]:
    """What mpirun on worker 0 reads: its hostfile, its agent, and the settings above."""
    env = {
        "OMPI_MCA_orte_default_hostfile": hostfile_path,
        "OMPI_MCA_plm_rsh_agent": agent_path,
        "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
        "OMPI_MCA_orte_leave_session_attached": "1",
        ADDRESS_NAME: ray_address,
    }
    if shared_hostname:
        env["OMPI_MCA_btl"] = "self,tcp"
    if as_root:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def write_launcher_files(directory: str, *, hosts: list[str], slots: int, python: str) -> tuple[str, str]:
    """Write the hostfile and the agent script into ``directory``; return their paths."""
    hostfile_path = os.path.join(directory, "hostfile")
    with open(hostfile_path, "w") as f:
        f.write(hostfile(hosts, slots))
    agent_path = os.path.join(directory, "agent")
    with open(agent_path, "w") as f:
        f.write(f"#!/bin/sh\nexec {shlex.quote(python)} -m cuberay.train.mpi_agent \"$@\"\n")
    os.chmod(agent_path, stat.S_IRWXU)
    return hostfile_path, agent_path
