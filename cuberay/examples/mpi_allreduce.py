"""An mpi4py allreduce, as an MPIJob's launcher would run it: ``mpirun python -m cuberay.examples.mpi_allreduce``.

Each rank adds ``rank + 1``; every rank prints the sum (``n (n + 1) / 2`` for ``n`` ranks), the Ray node
it runs on and the gang host whose agent started it (``CUBERAY_NODE_ID``, ``CUBERAY_MPI_AGENT``: set by
cuberay's MPI agent on the worker that started this rank's daemon), and the gang's ``RANK`` if it leaked in
(``-``: the daemons do not pass the workers' rank names on; a rank's place is Open MPI's).
"""

from __future__ import annotations

import os


def main() -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    expected = size * (size + 1) // 2
    status = "ok" if total == expected else f"WRONG (expected {expected})"
    print(f"mpi allreduce {status} rank={rank} size={size} sum={total} node={os.environ.get('CUBERAY_NODE_ID', '')} "
          f"agent={os.environ.get('CUBERAY_MPI_AGENT', '')} gang_rank={os.environ.get('RANK', '-')}", flush=True)
    if total != expected:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
