"""The policy layer: pure admission decisions (ledger, placement, queue, quotas, preemption, reservation).

No Ray, no Kubernetes, no database, no I/O: every function takes state and returns decisions, so the live
controller, the simulator and the tests run the same code. Imports only the spec layer below it.
"""
