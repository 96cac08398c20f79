"""The simulator: replays a job trace through the live admission and placement code on a simulated cluster.

``engine`` runs the discrete-event replay, ``trace`` holds a trace's jobs and reads trace files, ``cluster`` the
nodes (uniform, or from a cluster or platform file), ``inputs`` turns command-line words into those, ``plot`` draws
reports. Pure: no Ray, no Kubernetes, no database.
"""

from cuberay.platform.sim.cluster import NodeSpec, uniform_cluster
from cuberay.platform.sim.engine import Report, simulate
from cuberay.platform.sim.trace import TraceJob, load_generic, load_philly

__all__ = ["NodeSpec", "Report", "TraceJob", "load_generic", "load_philly", "simulate", "uniform_cluster"]
