"""What runs users' code on the nodes, whatever the job's kind: a command's process group and its watchdog
(process.py), the environment every worker sees (env.py), and the runner of small jobs (small_runner.py).

Below the client and the workloads (train/, tune/, serve/ use it; none of it calls the controller).
"""
