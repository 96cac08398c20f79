"""mpirun's remote-start agent in a cuberay gang: ``agent HOST COMMAND...`` runs COMMAND in gang worker HOST.

mpirun calls its ``plm_rsh_agent`` as it would call ssh: the host, then the remote command as words
a shell joins (Open MPI quotes its own arguments for that shell, as sshd would run them). This
program joins them the same way and has the gang worker whose actor is named HOST run them
(:meth:`cuberay.train.gang.GangWorker.launch`) with ``bash -c``, on that worker's node, in its bundle.
It lives as long as the remote command, as ssh does, and exits with its code. See
:mod:`cuberay.train.mpi`.
"""

from __future__ import annotations

import logging
import os
import sys

from cuberay.train.mpi import ADDRESS_NAME, NAMESPACE


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("cuberay mpi agent: usage: agent HOST COMMAND... (mpirun calls it; see OMPI_MCA_plm_rsh_agent)",
              file=sys.stderr)
        return 2
    host, command = argv[0], " ".join(argv[1:])
    address = os.environ.get(ADDRESS_NAME)
    if not address:
        print(f"cuberay mpi agent: {ADDRESS_NAME} is not set; this agent runs only under mpirun in a cuberay "
              f"gang with mpi set", file=sys.stderr)
        return 2
    import ray

    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as err:  # noqa: BLE001 - any failure to reach Ray is this host being unreachable
        return _unreachable(host, f"cannot connect to the Ray cluster at {address} ({err})")
    try:
        worker = ray.get_actor(host, namespace=NAMESPACE)
    except ValueError:
        return _unreachable(host, "no gang worker has that name; mpirun's hosts must come from the gang's hostfile "
                                  "($OMPI_MCA_orte_default_hostfile), not -H or another hostfile")
    try:
        code = int(ray.get(worker.launch.remote(command)))
    except ray.exceptions.RayError as err:
        return _unreachable(host, f"the gang worker could not run mpirun's daemon ({err}); its node may be lost")
    return code if code >= 0 else 128 - code  # a daemon killed by signal N exits 128+N, as a shell says


def _unreachable(host: str, why: str) -> int:
    print(f"cuberay mpi agent: host {host!r}: {why}", file=sys.stderr)
    return 255  # ssh's code for a host it cannot reach


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
