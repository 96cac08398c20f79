"""The simulator: replays a job trace through the live admission and placement code on a simulated cluster.

``engine`` runs the discrete-event replay, ``inputs`` reads traces and quotas, ``cluster`` reads cluster files,
``plot`` draws reports. Pure: no Ray, no Kubernetes, no database.
"""

from cuberay.platform.sim.engine import (
    NodeSpec,
    Report,
    TraceJob,
    load_generic,
    load_philly,
    simulate,
    uniform_cluster,
)

__all__ = ["NodeSpec", "Report", "TraceJob", "load_generic", "load_philly", "simulate", "uniform_cluster"]
