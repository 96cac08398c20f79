"""Card shares on a live Ray node: four ``gpu: 0.5`` workers on a node with 2 GPUs, two per card.

Ray picks the physical card of each placement-group bundle and sets the worker's
CUDA_VISIBLE_DEVICES; the ledger takes the cards the workers report
(``Ledger.follow_cards``), so what it believes matches what runs.
"""

from __future__ import annotations

import io
import re

import ray

from cuberay.platform.api.records import JobIdentity
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.spec.resources import parse_worker
from cuberay.train.gang import run_command_gang
from tests.support import wait_for

JOB = JobIdentity(job_id="shares-1", name="shares", tenant="team-a", user="alice", run_id="r1", kind="Task",
                  gpu="0.5")
LINE = re.compile(r"rank=(\d+) cards=(\S*) node=(\S+)")
LABEL = {"cuberay.io/pool": "two-card-test"}


def _two_card_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and (n.get("Labels") or {}).get("cuberay.io/pool")
            == LABEL["cuberay.io/pool"]]


def test_four_half_card_workers_run_two_per_card_and_the_ledger_follows(ray_cluster):
    node = ray_cluster.cluster.add_node(num_cpus=1, num_gpus=2, memory=2 * 2**30, labels=LABEL, wait=False)
    try:
        (node_id,) = wait_for(_two_card_nodes, 120, "the 2-GPU node to join")
        out = io.StringIO()
        code = run_command_gang('echo "rank=$RANK cards=$CUDA_VISIBLE_DEVICES node=$CUBERAY_NODE_ID"',
                               node_ids=[node_id] * 4, bundle={"GPU": 0.5, "CPU": 0.01}, env={}, job=JOB,
                               timeout_s=120, out=out)
        assert code == 0, out.getvalue()[-2000:]
        seen = {int(rank): (cards, where) for rank, cards, where in LINE.findall(out.getvalue())}
        assert sorted(seen) == [0, 1, 2, 3], out.getvalue()[-2000:]  # distinct ranks
        assert {where for _, where in seen.values()} == {node_id}
        cards = [seen[r][0] for r in range(4)]
        assert all(re.fullmatch(r"[01]", c) for c in cards), cards  # one card each, of the node's two
        assert sorted(cards) == ["0", "0", "1", "1"], cards  # two workers per card
        # The ledger's own pick for the same gang, then the cards Ray gave: it follows them.
        ledger = Ledger()
        ledger.add_node(node_id, {"GPU": 2.0, "CPU": 1.0})
        predicted = ledger.allocate(JOB.job_id, parse_worker(cpu="10m", gpu="0.5"), [node_id] * 4)
        print("ray gave cards", cards, "the ledger predicted", [s.cards[0][0] for s in predicted.slots])
        assert ledger.follow_cards(JOB.job_id, [[int(c)] for c in cards])
        assert [s.cards[0][0] for s in ledger.allocations[JOB.job_id].slots] == [int(c) for c in cards]
        assert ledger.nodes[node_id].cards == [0.0, 0.0]
        ledger.check_invariants()
    finally:
        ray_cluster.cluster.remove_node(node)
        wait_for(lambda: not _two_card_nodes(), 90, "the 2-GPU node to leave")
