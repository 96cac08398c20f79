"""Scheduling does not depend on the process's hash seed.

A node offering two accelerator kinds is where a set's iteration order used to leak into placement:
which kind the ledger tracks per card (and so which jobs fit) changed with PYTHONHASHSEED. The same
simulation runs here in two fresh interpreters with different seeds and must give the same answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.placement import place
from cuberay.platform.sim.cluster import NodeSpec
from cuberay.platform.sim.engine import simulate
from cuberay.platform.sim.trace import TraceJob
from cuberay.platform.spec.resources import CARD_RESOURCES, CPU, GPU, Resources, WorkerRequest

mixed = {GPU: 4, "TPU": 4, CPU: 32}
report = simulate([TraceJob("a", 0, 100, gpus=1, workers=2), TraceJob("b", 0, 100, gpus=1, workers=2)],
                  [NodeSpec("n0", mixed)], policy="cuberay")
ledger = Ledger()
node = ledger.add_node("n0", mixed)
tpu = WorkerRequest(Resources({"TPU": 1, CPU: 1}))
print(json.dumps({"finished": report.finished, "rejected": report.rejected, "jcts": report.jcts,
                  "card_resource": node.card_resource, "cards": node.cards, "order": list(CARD_RESOURCES),
                  "tpu_placed": place(ledger.nodes.values(), tpu, 1, "pack") is not None}))
"""


def _run(seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_node_with_two_accelerator_kinds_schedules_the_same_under_any_hash_seed() -> None:
    # Seeds 0 and 4 put a different kind first in a set of the five accelerator names.
    first, second = _run("0"), _run("4")
    assert first == second
    # GPU comes first in the fixed order: its cards are tracked, so both GPU gangs run, one after the other.
    assert first["card_resource"] == "GPU" and first["cards"] == [1.0] * 4
    assert (first["finished"], first["rejected"], first["jcts"]) == (2, 0, [100.0, 100.0])
