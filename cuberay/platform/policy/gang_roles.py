"""Placing a gang with roles: its workers, then each role on what they leave, all or nothing.

A parameter-server job is one gang of unlike members: workers (GPUs, packed), parameter servers (CPU, spread,
often on other nodes), a chief, an evaluator. Admission places the workers as any gang's; then each role in
turn on the capacity the members placed before it leave, each by its own placement and node selector. Nothing
is kept unless every role finds room. Where the workers' choice of nodes leaves a role none (CPU-only workers
on the one node a parameter server's selector allows), the roles are placed first and the workers on what they
leave. Two orders, not every order: a gang that fits only some third way waits.

Pure: the members placed so far are held on the ledger under scratch ids and given back before returning.
"""

from __future__ import annotations

from typing import Iterable

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.nodes import NodeState
from cuberay.platform.policy.placement import Reserved, place
from cuberay.platform.policy.queue import JobRequest, RoleGroup
from cuberay.platform.policy.topology import Locality
from cuberay.platform.policy.unplaceable import why_not

_SCRATCH = "\0role:"  # never a job id: ids are generated, printable


def place_roles(ledger: Ledger, job: JobRequest, workers_at: list[str], reserved: Reserved | None = None,
                near: Locality | None = None) -> list[str] | None:
    """The gang's nodes, workers first (``workers_at``, where they were placed) then each role's members; else
    the roles placed first and the workers after them; None if neither order has room."""
    held: list[str] = []
    try:
        ledger.allocate(_hold(job, held), job.worker, workers_at)
        roles = _place_each(ledger, job, job.roles, reserved, held)
        if roles is not None:
            return workers_at + roles
    finally:
        _give_back(ledger, held)
    try:
        roles = _place_each(ledger, job, job.roles, reserved, held)
        if roles is None:
            return None
        workers = place(ledger, job.worker, job.workers, job.placement, reserved=reserved, near=near)
        return None if workers is None else workers + roles
    finally:
        _give_back(ledger, held)


def _place_each(ledger: Ledger, job: JobRequest, roles: tuple[RoleGroup, ...], reserved: Reserved | None,
                held: list[str]) -> list[str] | None:
    """Each role's nodes in turn, each held once placed; None at the first role without room."""
    nodes: list[str] = []
    for role in roles:
        found = place(ledger, role.worker, role.count, role.placement, reserved=reserved)
        if found is None:
            return None
        ledger.allocate(_hold(job, held), role.worker, found)
        nodes += found
    return nodes


def _give_back(ledger: Ledger, held: list[str]) -> None:
    while held:
        ledger.release(held.pop())


def _hold(job: JobRequest, held: list[str]) -> str:
    held.append(f"{_SCRATCH}{job.id}:{len(held)}")
    return held[-1]


def could_ever_place(nodes: Iterable[NodeState], job: JobRequest, ledger: Ledger) -> str | None:
    """Why the gang with roles could never be placed on these nodes, empty (None: it could)."""
    empty = Ledger()
    empty.topology = ledger.topology
    for node in nodes:
        if node.alive:
            empty.add_node(node.id, node.capacity, node.labels)
    workers = place(empty, job.worker, job.workers, job.placement, near=job.topology)
    if workers is None:
        return why_not(empty.nodes.values(), job.worker, job.workers, job.placement, near=job.topology,
                       topology=empty.topology)
    if place_roles(empty, job, workers, near=job.topology) is not None:
        return None
    return _role_without_room(empty, job, workers)


def _role_without_room(empty: Ledger, job: JobRequest, workers: list[str]) -> str:
    """Name the first role that finds no room once the members before it are placed."""
    empty.allocate(f"{_SCRATCH}workers", job.worker, workers)
    for i, role in enumerate(job.roles):
        found = place(empty, role.worker, role.count, role.placement)
        if found is None:
            return f"roles.{role.name}: {_alone_or_after(empty, role, i)}"
        empty.allocate(f"{_SCRATCH}{i}", role.worker, found)
    return "the roles find no room together"  # not reached: place_roles failed on the same steps


def _alone_or_after(empty: Ledger, role: RoleGroup, index: int) -> str:
    alone = list(empty.nodes.values())
    if place(alone, role.worker, role.count, role.placement, empty=True) is None:
        return why_not(alone, role.worker, role.count, role.placement)
    return (f"its {role.count} member(s) fit the empty nodes but not beside the workers"
            f"{' and the roles before it' if index else ''}, placed either before or after them; lower its "
            f"resources, change its node_selector or placement, or add nodes")
