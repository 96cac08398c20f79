"""Plots of simulator reports: JCT CDF per policy, GPU utilisation and queue length over time.

matplotlib is optional (``pip install "cuberay[plot]"``); it is imported only
when a plot is drawn, with the non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from cuberay.errors import SpecError
from cuberay.platform.sim.engine import Report

Sample = tuple[float, float, int]  # (t, allocated GPUs, queue length), valid until the next sample


def downsample(timeline: Sequence[Sample], end: float | None = None, bins: int = 500
               ) -> tuple[list[float], list[float], list[float]]:
    """Time-weighted means of a step timeline over ``bins`` equal windows.

    Each sample holds from its time to the next sample's (the last one until
    ``end``). Returns (window midpoints, mean allocated GPUs, mean queue length);
    windows with no samples are left out.
    """
    if not timeline:
        return [], [], []
    t0 = timeline[0][0]
    t_end = max(end if end is not None else timeline[-1][0], timeline[-1][0])
    if t_end <= t0:
        return [t0], [float(timeline[0][1])], [float(timeline[0][2])]
    width = (t_end - t0) / bins
    used = [0.0] * bins
    queued = [0.0] * bins
    covered = [0.0] * bins
    for i, (a, gpus, qlen) in enumerate(timeline):
        b = timeline[i + 1][0] if i + 1 < len(timeline) else t_end
        k = min(int((a - t0) / width), bins - 1)
        while a < b:
            # The last window runs to the end, so the loop ends even when float edges land on ``a``.
            edge = t0 + (k + 1) * width if k < bins - 1 else b
            stop = min(b, edge)
            if stop > a:
                dt = stop - a
                used[k] += gpus * dt
                queued[k] += qlen * dt
                covered[k] += dt
                a = stop
            if stop >= edge:
                k += 1
    mids, u, q = [], [], []
    for k in range(bins):
        if covered[k] > 0:
            mids.append(t0 + (k + 0.5) * width)
            u.append(used[k] / covered[k])
            q.append(queued[k] / covered[k])
    return mids, u, q


def cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Sorted values and their cumulative fractions (for a step CDF)."""
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SpecError('--plot needs matplotlib, which is not installed; run: pip install "cuberay[plot]"') from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    return plt


def plot_reports(reports: Sequence[Report], path: str | Path, title: str | None = None) -> Path:
    """Write a PNG: JCT CDF per policy (left), GPU utilisation and queue length over time (right)."""
    plt = _pyplot()
    path = Path(path)
    fig, (ax_cdf, ax_util, ax_queue) = plt.subplots(1, 3, figsize=(16, 4.8), constrained_layout=True)
    for report in reports:
        xs, ys = cdf([j / 3600 for j in report.jcts])
        if xs:
            ax_cdf.step(xs, ys, where="post", label=f"{report.policy} (avg {report.avg_jct_s / 3600:.1f} h)")
        mids, used, queued = downsample(report.timeline)
        hours = [m / 3600 for m in mids]
        cap = report.gpus or 1.0
        ax_util.plot(hours, [100 * u / cap for u in used], label=report.policy, linewidth=1)
        ax_queue.plot(hours, queued, label=report.policy, linewidth=1)
    ax_cdf.set(xscale="log", xlabel="job completion time (hours, log)", ylabel="fraction of finished jobs",
               title="JCT CDF")
    ax_util.set(xlabel="simulated time (hours)", ylabel="GPUs allocated (%)", ylim=(0, 105),
                title="GPU allocation over time")
    ax_queue.set(xlabel="simulated time (hours)", ylabel="queued jobs", title="queue length over time")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax_cdf.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax_cdf.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax_cdf.xaxis.set_minor_formatter(NullFormatter())  # crowded labels on a log axis
    for ax in (ax_cdf, ax_util, ax_queue):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise SpecError(f"cannot write the plot ({exc.strerror}); pick a writable path", file=str(path)) from None
    finally:
        plt.close(fig)
    return path
