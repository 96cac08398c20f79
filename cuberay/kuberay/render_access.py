"""What keeps tenants apart on Kubernetes, beyond a RayCluster each: a NetworkPolicy and namespace RBAC.

- NetworkPolicy ``cuberay-tenant-isolation``: pods of the tenant's namespace accept traffic from the
  namespace's own pods (Ray's GCS, raylets, object manager, dashboard and drivers talk among themselves),
  from the KubeRay operator's namespace on the dashboard port only (RayJob and RayService status), and from
  anywhere on Ray Serve's HTTP port. Other tenants' pods cannot reach the tenant's Ray ports.
- Role and RoleBinding ``cuberay-tenant``: the tenant's members and admins (as Kubernetes users) manage the
  Ray objects of their namespace and read its pods and logs; nothing outside it.
- The Ray token: the RayCluster asks KubeRay for token authentication (``authOptions.mode: token``), and
  KubeRay keeps a random token in a Secret of that namespace, one per cluster.
"""

from __future__ import annotations

from typing import Any

from cuberay.kuberay import labels as L
from cuberay.kuberay.manifest import Manifest

POLICY_NAME = "cuberay-tenant-isolation"
ROLE_NAME = "cuberay-tenant"
DASHBOARD_PORT = 8265
SERVE_PORT = 8000
OPERATOR_NAMESPACE = "ray-system"  # where the KubeRay operator runs; edit the policy if yours differs


def network_policy(platform: Any, tenant: Any) -> Manifest:
    tcp = lambda port: {"protocol": "TCP", "port": port}  # noqa: E731
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": POLICY_NAME, "namespace": tenant.name,
                        "labels": L.base_labels(platform.metadata.name, tenant.name)},
           "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [
               {"from": [{"podSelector": {}}]},
               {"from": [{"namespaceSelector": {"matchLabels": {L.NAMESPACE_NAME: OPERATOR_NAMESPACE}}}],
                "ports": [tcp(DASHBOARD_PORT)]},
               {"ports": [tcp(SERVE_PORT)]},
           ]}}
    manifest = Manifest(obj, [
        f"Tenant {tenant.name}: only its own pods reach its Ray ports (GCS 6379, dashboard, raylets, workers).",
        f"The KubeRay operator (namespace {OPERATOR_NAMESPACE}; change it if yours runs elsewhere) reads the",
        f"dashboard on {DASHBOARD_PORT}; Ray Serve's HTTP port {SERVE_PORT} is open to clients.",
        "Needs a network plugin that enforces NetworkPolicy (Calico, Cilium, ...)."])
    manifest.note(("spec", "ingress", 0, "from"), "the tenant's own pods")
    return manifest


def tenant_rbac(platform: Any, tenant: Any) -> list[Manifest]:
    """Role + RoleBinding for the tenant's named members and admins (a wildcard member binds no one)."""
    labels = L.base_labels(platform.metadata.name, tenant.name)
    meta = {"name": ROLE_NAME, "namespace": tenant.name, "labels": labels}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta), "rules": [
        {"apiGroups": ["ray.io"], "resources": ["rayclusters", "rayjobs", "rayservices"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log", "services", "configmaps"],
         "verbs": ["get", "list", "watch"]},
    ]}
    users = sorted({u for u in (*tenant.members, *tenant.admins) if u != "*"})
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
               "subjects": [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in users],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME}}
    return [Manifest(role, [f"Tenant {tenant.name}: what its members may do in its namespace (Ray objects, "
                            f"pods and logs), and nothing outside it."]),
            Manifest(binding, [f"Tenant {tenant.name}: its members and admins from the platform file, as "
                               f"Kubernetes users" + (" (members '*' binds no one: list names)."
                                                      if "*" in tenant.members else ".")])]
