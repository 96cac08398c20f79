"""The platform on Kubernetes: KubeRay clusters per tenant, Kueue or Volcano quotas, validation, apply.

- ``render``, ``render_cluster``, ``render_queues``, ``render_job``: manifests from a platform file
  and job specs; ``manifest``: YAML with comments; ``storage``, ``quantities``, ``labels``: helpers.
- ``validate``, ``rules``, ``problems``: strict schemas (``schemas/``, see PROVENANCE.md) and the
  operator-only rules; ``podgroup``: the Volcano PodGroup KubeRay derives.
- ``kube_client``: server-side apply, status and delete through the official ``kubernetes`` client
  (imported lazily); ``schema_build``: the maintainer tool that made ``schemas/``.

The only package of cuberay that talks to Kubernetes.
"""
