"""The ledger's free-capacity index: refreshed on read below INDEX_MIN_NODES, on every change above it."""

from __future__ import annotations

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.node_index import INDEX_MIN_NODES, bucket_key
from tests.unit.helpers import add, worker


def _indexed_key(ledger: Ledger, node_id: str) -> tuple | None:
    return ledger._index.where.get(node_id)  # what the index holds now, without the refresh a read does


def test_a_small_cluster_refreshes_the_index_when_it_is_read():
    ledger = Ledger()
    for i in range(4):
        add(ledger, f"n{i}", gpus=8, cpus=64)
    ledger.allocate("a", worker(gpus=2, cpus=4), ["n0", "n1"])
    ledger.allocate("b", worker(gpus=0.5, cpus=2), ["n2"])
    ledger.release("a")
    node = ledger.nodes["n2"]
    assert _indexed_key(ledger, "n2") != bucket_key(node)  # not refreshed per allocation ...
    ledger.check_invariants()  # ... but every node is where its free capacity says once the index is read
    assert ledger.index.where["n2"] == bucket_key(node)


def test_a_large_cluster_keeps_the_index_current_on_every_change_even_after_growing_into_it():
    ledger = Ledger()
    for i in range(INDEX_MIN_NODES - 1):
        add(ledger, f"n{i:04d}", gpus=8, cpus=64)
    ledger.allocate("small", worker(gpus=3, cpus=4), ["n0000"])  # changed while the index was refreshed on read
    add(ledger, "last", gpus=8, cpus=64)  # now large: the pending change is applied, later ones at once
    assert _indexed_key(ledger, "n0000") == bucket_key(ledger.nodes["n0000"])
    ledger.allocate("big", worker(gpus=8, cpus=8), ["n0001"])
    assert _indexed_key(ledger, "n0001") == bucket_key(ledger.nodes["n0001"])
    ledger.check_invariants()
    ledger.remove_node("last")  # small again: back to refreshing on read
    ledger.release("big")
    assert _indexed_key(ledger, "n0001") != bucket_key(ledger.nodes["n0001"])
    ledger.check_invariants()
