"""Peak sampling of a worker's process tree (for automatic resource correction)."""

from __future__ import annotations

import subprocess
import sys

from cuberay.train.usage import PeakSampler

CHILD = ("import time\nblob = bytearray(300 * 2**20)\nfor i in range(0, len(blob), 4096): blob[i] = 1\n"
         "end = time.time() + 2\nwhile time.time() < end: pass\n")


def test_peaks_cover_the_children_of_the_process() -> None:
    shell = subprocess.Popen(["bash", "-c", f"{sys.executable} -c '{CHILD}'; true"])
    sampler = PeakSampler(shell.pid, interval_s=0.2).start()
    shell.wait(timeout=60)
    cpu, memory_gib = sampler.stop()
    assert memory_gib > 0.25  # the grandchild's 300 MiB, not just bash
    assert cpu > 0
