"""CubeStudio mounts (``name(pvc):/path``) as pod volumes and volume mounts.

A ``pvc`` mount gives each named member their own directory, as CubeStudio does: the PVC's
sub-path ``<user>`` at ``<path>/<user>`` (``/mnt/alice``). A tenant open to everyone
(members ``"*"``) cannot list its users, so it mounts the whole claim at ``<path>``, as
``pvc-share`` always does. ``hostpath``, ``configmap``, ``secret`` and ``memory`` map to the
volume of that type.
"""

from __future__ import annotations

import re
from typing import Any

from cuberay.errors import SpecError
from cuberay.kuberay.labels import volume_name

_MOUNT = re.compile(r"^(?P<source>[^;]+)\((?P<kind>[a-z-]+)\):(?P<target>/[^;]*)$")
SUPPORTED = ("pvc", "pvc-share", "hostpath", "configmap", "secret", "memory")


def _volume(kind: str, source: str, name: str) -> dict[str, Any]:
    if kind in ("pvc", "pvc-share"):
        return {"name": name, "persistentVolumeClaim": {"claimName": source}}
    if kind == "hostpath":
        return {"name": name, "hostPath": {"path": source, "type": "DirectoryOrCreate"}}
    if kind == "configmap":
        return {"name": name, "configMap": {"name": source}}
    if kind == "secret":
        return {"name": name, "secret": {"secretName": source}}
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": source}}


def tenant_storage(tenant: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) for the tenant's ``mounts``.

    Raises:
        SpecError: a mount kind that has no Kubernetes volume here (nfs, storage).
    """
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    users = [] if "*" in tenant.members else sorted({*tenant.members, *tenant.admins})
    for i, text in enumerate(tenant.mounts):
        match = _MOUNT.match(text.strip())
        if not match:  # the spec layer already checked the form
            continue
        source, kind, target = match["source"].strip(), match["kind"], match["target"].rstrip("/") or "/"
        if kind not in SUPPORTED:
            raise SpecError(f"mount {text!r}: kind {kind!r} has no Kubernetes volume in cuberay; use one of "
                            f"{', '.join(SUPPORTED)} (for NFS, create a PVC and mount it as 'name(pvc):{target}')",
                            path=f"spec.tenants.{tenant.name}.mounts[{i}]")
        name = volume_name(f"{kind}-{source}") if kind != "pvc" else volume_name(source)
        if any(v["name"] == name for v in volumes):
            name = f"{name[:58]}-{i}"
        volumes.append(_volume(kind, source, name))
        if kind == "pvc" and users:
            base = target if target != "/" else ""
            mounts += [{"name": name, "mountPath": f"{base}/{user}", "subPath": user} for user in users]
        else:
            mounts.append({"name": name, "mountPath": target})
    return volumes, mounts
