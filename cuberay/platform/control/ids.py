"""Job ids that stay unique on one Ray cluster, even when the platform's database is replaced.

A job id is ``<tenant>-<name>-<seq>`` with ``seq`` counted in the store; a fresh
database on the same cluster would count from 1 again and give a new job the id
(and the Ray Job submission id, which Ray never reuses) of an old one. So the
highest ``seq`` handed out per tenant/name is also kept in Ray's GCS key-value
store, which lives as long as the cluster, and a new ``seq`` is above both.
"""

from __future__ import annotations

from typing import Callable

KV_NAMESPACE = "cuberay"
# Where the head's API server says the console is (cuberay/console/service.py), for links from Ray's dashboard.
CONSOLE_URL_KEY = b"console-url"

Getter = Callable[[bytes], "bytes | None"]
Putter = Callable[[bytes, bytes], None]


class SeqFloor:
    """The cluster-wide high-water mark of job sequence numbers (``get``/``put`` are the KV's calls)."""

    def __init__(self, get: Getter, put: Putter) -> None:
        self._get = get
        self._put = put

    @staticmethod
    def key(tenant: str, name: str) -> bytes:
        # By the id's prefix, not the pair: what must not repeat is the id (and the Ray Job id made of it).
        return f"job-seq/{tenant}-{name}".encode()

    def next(self, tenant: str, name: str, store_next: int) -> int:
        """The seq of a new job: the store's next one, or one above the cluster's highest if that is higher."""
        seen = self._get(self.key(tenant, name))
        return max(store_next, int(seen) + 1 if seen else 1)

    def record(self, tenant: str, name: str, seq: int) -> None:
        self._put(self.key(tenant, name), str(seq).encode())
