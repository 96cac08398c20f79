"""A pipeline's DAG with step states: as text (levels of the graph) and as a PNG (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

COLORS = {"SUCCEEDED": "#7fc97f", "RUNNING": "#80b1d3", "PENDING": "#eeeeee", "SKIPPED": "#dddddd",
          "FAILED": "#f08080", "UPSTREAM_FAILED": "#f4c2c2", "CANCELLED": "#fdb462"}


def levels(spec: Mapping[str, Any]) -> list[list[str]]:
    """Steps by depth: level 0 has no dependencies, level k depends on something of level k-1."""
    deps = {s["name"]: list(s.get("depends_on") or []) for s in spec["steps"]}
    depth: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((level(d) for d in deps[name]), default=-1)
        return depth[name]

    out: list[list[str]] = []
    for name in deps:  # declaration order within a level
        k = level(name)
        out.extend([] for _ in range(k + 1 - len(out)))
        out[k].append(name)
    return out


def text(spec: Mapping[str, Any], steps: Mapping[str, Any] | None = None) -> str:
    """One line per step, indented by level: ``name [STATE, attempt n] <- its dependencies``."""
    deps = {s["name"]: list(s.get("depends_on") or []) for s in spec["steps"]}
    lines = []
    for k, names in enumerate(levels(spec)):
        for name in names:
            rec = (steps or {}).get(name)
            state = f" [{rec.state.value}" + (f", attempt {rec.attempt}" if rec.attempt > 1 else "") + "]" \
                if rec is not None else ""
            after = f"  <- {', '.join(deps[name])}" if deps[name] else ""
            lines.append(f"{'    ' * k}{name}{state}{after}")
    return "\n".join(lines)


def png(spec: Mapping[str, Any], steps: Mapping[str, Any] | None, path: Path, title: str) -> Path:
    """The DAG as a PNG: boxes by level (left to right) coloured by state, arrows for depends_on."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = levels(spec)
    where = {name: (k, -i + (len(names) - 1) / 2) for k, names in enumerate(rows) for i, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(max(4.0, 2.6 * len(rows)), max(2.5, 1.0 * max(len(r) for r in rows))))
    for step in spec["steps"]:
        x, y = where[step["name"]]
        for dep in step.get("depends_on") or []:
            dx, dy = where[dep]
            ax.annotate("", xy=(x - 0.32, y), xytext=(dx + 0.32, dy),
                        arrowprops={"arrowstyle": "->", "color": "#555555"})
    for name, (x, y) in where.items():
        rec = (steps or {}).get(name)
        state = rec.state.value if rec is not None else "PENDING"
        ax.text(x, y, f"{name}\n{state.lower()}" if rec is not None else name, ha="center", va="center",
                fontsize=9, bbox={"boxstyle": "round", "facecolor": COLORS.get(state, "#ffffff")})
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylim(-max(len(r) for r in rows) / 2 - 0.2, max(len(r) for r in rows) / 2 + 0.2)
    ax.axis("off")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
