"""A finished search, written down: results.json, trials.csv and a PNG, as NNI's web UI shows them.

The PNG has NNI's two views: each trial's value with the best so far (by trial
number), and every trial's intermediate results per report (so the trials a
scheduler stopped early show as short curves).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cuberay.tune.search import SearchResult


def summary(result: SearchResult) -> dict[str, Any]:
    best = result.best
    return {
        "metric": result.metric, "mode": result.mode,
        "best_value": best.value if best else None, "best_config": best.config if best else None,
        "best_trial": best.trial_id if best else None,
        "trials": len(result.trials), "errored": result.counts.get("errored", 0),
        "stopped_early": result.counts.get("stopped_early", 0),
        "wall_s": round(result.wall_s, 3), "trial_time_s": round(result.trial_time_s, 3),
    }


def message(result: SearchResult, where: str | None = None) -> str:
    """One line for the job record: the best value and config, the trial counts, where the files are."""
    s = summary(result)
    config = ", ".join(f"{k}={_short(v)}" for k, v in (s["best_config"] or {}).items())
    text = (f"best {s['metric']} {s['best_value']:.6g} ({config}); {s['trials']} trials: "
            f"{s['trials'] - s['errored']} ran ({s['stopped_early']} stopped early), {s['errored']} failed")
    return text + (f"; results in {where}" if where else "")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write(result: SearchResult, out_dir: str | Path) -> dict[str, str]:
    """results.json (summary and every trial), trials.csv, progress.png; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trials = sorted(result.trials, key=lambda t: t.index)
    paths = {"json": str(out / "results.json"), "csv": str(out / "trials.csv")}
    data = {**summary(result), "counts": result.counts, "trials_detail": [asdict(t) for t in trials]}
    Path(paths["json"]).write_text(json.dumps(data, indent=2, default=str) + "\n")
    keys = sorted({k for t in trials for k in t.config})
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial_id", "state", result.metric, "final", "iterations", "runtime_s", *keys, "error"])
        for t in trials:
            writer.writerow([t.trial_id, t.state, t.value, t.final, t.iterations, round(t.runtime_s, 3),
                             *[json.dumps(t.config.get(k)) if isinstance(t.config.get(k), (dict, list))
                               else t.config.get(k) for k in keys], (t.error or "").splitlines()[0:1]])
    png = plot(result, out / "progress.png")
    if png:
        paths["png"] = png
    return paths


def plot(result: SearchResult, path: Path) -> str | None:
    """The PNG, or None where matplotlib is not installed (the `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    trials = sorted(result.trials, key=lambda t: t.index)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [i for i, t in enumerate(trials) if t.value is not None]
    ys = [t.value for t in trials if t.value is not None]
    pick = max if result.mode == "max" else min
    best = [pick(ys[: i + 1]) for i in range(len(ys))]
    left.scatter(xs, ys, s=14, label=f"trial {result.metric}")
    left.step(xs, best, where="post", color="C3", label="best so far")
    left.set(xlabel="trial", ylabel=result.metric, title="Trials and best so far")
    left.legend()
    for t in trials:
        if t.history:
            right.plot(range(1, len(t.history) + 1), t.history, alpha=0.6, marker=".")
    right.set(xlabel="report (epoch)", ylabel=result.metric, title="Intermediate results per trial")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return str(path)
