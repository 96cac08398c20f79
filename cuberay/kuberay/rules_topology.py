"""The CEL rules of Kueue's Topology and Volcano's HyperNode CRDs that the shipped schemas drop (see rules.py)."""

from __future__ import annotations

from typing import Any, Iterator

Found = Iterator[tuple[str, tuple[Any, ...], str]]  # (rule, path, message)
HOSTNAME = "kubernetes.io/hostname"
SELECTORS = ("exactMatch", "regexMatch", "labelMatch")


def kueue_topology(obj: dict[str, Any]) -> Found:
    if obj.get("kind") != "Topology" or not str(obj.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
        return
    levels = [level.get("nodeLabel") if isinstance(level, dict) else None
              for level in ((obj.get("spec") or {}).get("levels") or [])]
    for i, label in enumerate(levels):
        if label in levels[:i]:
            yield ("kueue.topology-levels-unique", ("spec", "levels", i, "nodeLabel"),
                   f"level {label!r} is listed twice; each node label names one level")
        if label == HOSTNAME and i != len(levels) - 1:
            yield ("kueue.topology-hostname-lowest", ("spec", "levels", i, "nodeLabel"),
                   f"{HOSTNAME} can only be the lowest level; move it to the end")


def volcano_hypernode(obj: dict[str, Any]) -> Found:
    if obj.get("kind") != "HyperNode":
        return
    for i, member in enumerate((obj.get("spec") or {}).get("members") or []):
        selector = (member or {}).get("selector") or {}
        given = [key for key in SELECTORS if key in selector]
        if len(given) != 1:
            yield ("volcano.hypernode-one-selector", ("spec", "members", i, "selector"),
                   f"a member selector needs exactly one of {', '.join(SELECTORS)} (it has "
                   f"{', '.join(given) or 'none'})")
        if "labelMatch" in selector and (member or {}).get("type") != "Node":
            yield ("volcano.hypernode-label-match-nodes", ("spec", "members", i, "type"),
                   "labelMatch selects nodes only: set type: Node, or select HyperNodes by exactMatch")
