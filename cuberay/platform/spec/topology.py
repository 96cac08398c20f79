"""Topology in specs: the platform's levels of closeness (node labels) and a job's request for one of them.

The platform file names levels from widest to narrowest, each read from a
node label (``cuberay node start -- --labels=cuberay.io/rack=r3``, a cluster
file's or node pool's labels, a KubeRay worker group's labels); the host is
always the narrowest level. Without a ``topology`` the one level is the RDMA
domain (``cuberay.io/rdma-domain``), which RDMA jobs prefer as before.

A job asks ``topology: {required: rack}`` (the whole gang in one rack, or it
waits) or ``{preferred: rack}`` (in one rack if any fits, else across as few as
possible).
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from cuberay.platform.spec.common import Name, SpecModel
from cuberay.platform.spec.load import FieldError, label_map

HOST_LEVEL = "host"
RDMA_DOMAIN_LEVEL = ("rdma-domain", "cuberay.io/rdma-domain")
MAX_LEVELS = 15  # Kueue's Topology takes 16 levels, the host included


class TopologyLevel(SpecModel):
    """One level of closeness: its name and the node label whose value names a node's domain of it."""

    name: Name = Field(description="The level's name, as jobs write it (topology: {required: rack}), e.g. "
                                   "block, rack, nvlink. 'host' is the built-in narrowest level.")
    label: str | None = Field(None, description="The node label holding the domain, e.g. cuberay.io/rack or "
                                                "topology.kubernetes.io/zone; null = cuberay.io/<name>.")

    @field_validator("name")
    @classmethod
    def _not_host(cls, v: str) -> str:
        if v == HOST_LEVEL:
            raise ValueError("'host' is the built-in narrowest level (every node is its own host); name the "
                             "levels above it, e.g. rack and block")
        return v

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                label_map({v: "x"})
            except FieldError as err:
                raise ValueError(str(err)) from None
        return v

    @property
    def node_label(self) -> str:
        return self.label or f"cuberay.io/{self.name}"


class TopologySpec(SpecModel):
    """Levels of closeness of the platform's nodes, widest first (the host is below the last)."""

    levels: list[TopologyLevel] = Field(min_length=1, max_length=MAX_LEVELS,
                                        description="From widest to narrowest, e.g. [{name: block}, {name: rack}]; "
                                                    "the host is the narrowest level, below these.")
    fill: bool = Field(False, description="Place jobs that ask for no topology (pack, frag, best_fit, auto) in the "
                                          "fullest domain of the narrowest level that holds them, so that emptier "
                                          "ones stay whole for the gangs that ask; they are never held back by it. "
                                          "Off by default: it changes where such jobs land, and a multi-worker "
                                          "one then runs its policy once per domain.")

    @field_validator("levels")
    @classmethod
    def _unique(cls, v: list[TopologyLevel]) -> list[TopologyLevel]:
        for what, seen in (("name", [lv.name for lv in v]), ("label", [lv.node_label for lv in v])):
            for i, item in enumerate(seen):
                if item in seen[:i]:
                    raise FieldError([i, what], f"level {what} {item!r} is used twice (at [{seen.index(item)}] "
                                                f"and [{i}]); each level needs its own")
        return v

    def level_pairs(self) -> tuple[tuple[str, str], ...]:
        """(name, node label) of each level, widest first."""
        return tuple((lv.name, lv.node_label) for lv in self.levels)


def level_pairs(topology: TopologySpec | None) -> tuple[tuple[str, str], ...]:
    """The levels of a platform: its own, or the RDMA domain when it declares none."""
    return topology.level_pairs() if topology is not None else (RDMA_DOMAIN_LEVEL,)


class TopologyRequest(SpecModel):
    """How close a job's workers must or should be: exactly one of required and preferred, naming a level."""

    required: Name | None = Field(None, description="The whole gang inside one domain of this level (e.g. rack), "
                                                    "or it waits; refused at submit if no domain could ever hold it.")
    preferred: Name | None = Field(None, description="Inside one domain of this level if any fits now, else "
                                                     "across as few domains as possible (widening a level at a time).")

    @model_validator(mode="after")
    def _one(self) -> TopologyRequest:
        if (self.required is None) == (self.preferred is None):
            seen = "neither is set" if self.required is None else \
                f"both are set (required: {self.required}, preferred: {self.preferred})"
            raise FieldError(["required"], f"set exactly one of required and preferred, e.g. {{required: rack}}; "
                                           f"{seen}")
        return self

    @property
    def mode(self) -> str:
        return "required" if self.required is not None else "preferred"

    @property
    def level(self) -> str:
        return self.required or self.preferred  # type: ignore[return-value]
