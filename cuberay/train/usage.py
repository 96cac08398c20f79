"""Peak CPU and memory of a worker's processes, for automatic resource correction.

A daemon thread samples the worker's process tree (the process and every descendant) once a
second with psutil: CPU as cores (the sum of per-process ``cpu_percent`` / 100) and memory as
the sum of resident set sizes in GiB, keeping the highest of each. The run's driver (command
mode) or each Train worker (function mode) reports the peaks to the controller when the run
succeeded; the controller keeps them with the attempt (``usage_samples``).
"""

from __future__ import annotations

import logging
import os
import threading

import psutil

log = logging.getLogger("cuberay.train")
GiB = 2**30
SAMPLE_S = 1.0


class PeakSampler:
    """Highest cores and GiB the process tree of ``pid`` (default: this process) used while it ran."""

    def __init__(self, pid: int | None = None, interval_s: float = SAMPLE_S) -> None:
        self._root = psutil.Process(pid or os.getpid())
        self._procs: dict[int, psutil.Process] = {}
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.cpu = 0.0
        self.memory_gib = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True, name="cuberay-peak-sampler")

    def start(self) -> PeakSampler:
        self._sample()  # primes cpu_percent: its first call per process always says 0
        self._thread.start()
        return self

    def stop(self) -> tuple[float, float]:
        """Stop sampling; (peak cores, peak GiB)."""
        self._stop.set()
        self._thread.join(timeout=5)
        return self.cpu, self.memory_gib

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            tree = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        cpu = rss = 0.0
        for proc in tree:
            known = self._procs.setdefault(proc.pid, proc)  # the same object: cpu_percent measures since last call
            try:
                cpu += known.cpu_percent(None) / 100.0
                rss += known.memory_info().rss
            except psutil.Error:
                continue
        self.cpu = max(self.cpu, cpu)
        self.memory_gib = max(self.memory_gib, rss / GiB)


def report(job_id: str, worker: int, cpu: float, memory_gib: float) -> None:
    """Send one worker's peaks to the controller (errors are logged: a lost sample only delays correction)."""
    from cuberay.platform import client

    try:
        # Waited for (briefly): a driver that exits right after would otherwise drop the call. Through the
        # client, so it carries the job's driver secret (from the job's environment).
        client.api(timeout=10).usage(job_id, worker, cpu, memory_gib)
    except Exception as err:  # noqa: BLE001 - never fail a run over bookkeeping
        log.warning("could not report the resource use of %s to the controller: %s", job_id, err)
