"""Small runnable workloads: the demo, the tests and the docs use them as real jobs."""
