"""``cuberay sim``: replay a job trace through the real admission code and compare policies."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

import typer

from cuberay.cli import app
from cuberay.cli.output import Format, emit, error_console, output_option
from cuberay.cli.sim_replays import Replay, run_all
from cuberay.errors import SpecError
from cuberay.platform.policy.fit import tenant_quotas
from cuberay.platform.policy.scheduling import POLICIES, TenantQuota
from cuberay.platform.sim.cluster import NodeSpec, uniform_cluster
from cuberay.platform.sim.distance import DistanceCost
from cuberay.platform.sim.engine import Report
from cuberay.platform.sim.inputs import (
    TraceFormat,
    load_trace,
    seconds,
    unknown_tenants,
)
from cuberay.platform.sim.trace import TraceJob
from cuberay.platform.spec import Placement, Platform, load_platform
from cuberay.platform.spec.resource_grammar import parse_cpu, parse_memory

_HOURS = 3600.0

# Table rows: (label, value of a report as text). One column per policy, so runs compare side by side.
_METRICS: list[tuple[str, Callable[[Report], str]]] = [
    ("jobs", lambda r: f"{r.jobs:,}"),
    ("finished", lambda r: f"{r.finished:,}"),
    ("rejected", lambda r: f"{r.rejected:,}"),
    ("avg JCT (h)", lambda r: f"{r.avg_jct_s / _HOURS:.2f}"),
    ("p50 JCT (h)", lambda r: f"{r.p50_jct_s / _HOURS:.2f}"),
    ("p99 JCT (h)", lambda r: f"{r.p99_jct_s / _HOURS:.1f}"),
    ("avg wait (h)", lambda r: f"{r.avg_wait_s / _HOURS:.2f}"),
    ("max wait, jobs >= 16 GPUs (h)", lambda r: f"{r.max_wait_s_large / _HOURS:.1f}"),
    ("max wait to first start, jobs >= 16 GPUs (h)", lambda r: f"{r.max_first_wait_s_large / _HOURS:.1f}"),
    ("makespan (h)", lambda r: f"{r.makespan_s / _HOURS:.1f}"),
    ("GPU utilisation", lambda r: f"{100 * r.gpu_utilization:.1f}%"),
    ("GPU utilisation while jobs wait", lambda r: f"{100 * r.gpu_utilization_while_queued:.1f}%"),
    ("goodput", lambda r: f"{100 * r.goodput:.2f}%"),
    ("preemptions", lambda r: f"{r.preemptions:,}"),
    ("decisions/s", lambda r: f"{r.decisions_per_s:,.0f}"),
    ("wall (s)", lambda r: f"{r.wall_s:.1f}"),
]
_UNTIL_METRICS: list[tuple[str, Callable[[Report], str]]] = [
    ("queued at T", lambda r: f"{r.queued_at_end:,}"),
    ("running at T", lambda r: f"{r.running_at_end:,}"),
    ("GPUs allocated at T", lambda r: f"{100 * r.gpu_allocated_fraction:.1f}%"),
    ("GPU demand arrived by T", lambda r: f"{100 * r.arrived_gpu_demand:.1f}%"),
]


def _near_metrics(reports: Sequence[Report]) -> list[tuple[str, Callable[[Report], str]]]:
    """Rows of where gangs wider than a host landed: the share inside one domain of each level, the distance cost."""
    levels = [k[len("in_one_"):] for k in (reports[0].near if reports else {}) if k.startswith("in_one_")]
    rows: list[tuple[str, Callable[[Report], str]]] = [
        (f"multi-host gangs inside one {level}", lambda r, key=f"in_one_{level}": f"{100 * r.near.get(key, 0):.1f}%")
        for level in levels]
    return rows + [("mean distance slowdown", lambda r: f"{r.near.get('mean_slowdown', 1.0):.3f}x")]


def table_rows(reports: Sequence[Report], until: bool = False, near: bool = False) -> list[dict[str, str]]:
    """One row per metric, one column per policy run (times in hours, fractions in percent)."""
    metrics = _METRICS + (_UNTIL_METRICS if until else []) + (_near_metrics(reports) if near else [])
    return [{"metric": label, **{column(r): value(r) for r in reports}} for label, value in metrics]


def column(report: Report) -> str:
    """A run's column: its policy, and its placement when one was imposed on every job."""
    return report.policy if report.placement == "trace" else f"{report.policy}, {report.placement}"


@app.command("sim")
def sim(
    trace: Path = typer.Argument(..., metavar="TRACE", help="Trace CSV: Philly (timestamp,duration,num_gpus,"
                                 "gpu_time,cluster) or generic (submit_time,duration,gpus[,cpus,memory,workers,"
                                 "tenant,priority,max_workers,topology,slowdown_<level>]; gpus per worker, may "
                                 "be fractional; topology is required:LEVEL or preferred:LEVEL)."),
    fmt: Optional[TraceFormat] = typer.Option(None, "--trace-format",
                                              help="philly | generic (default: from the header)."),
    start: Optional[str] = typer.Option(None, "--start", help="First submission to replay: a date (2017-10-01, "
                                        "Philly) or seconds/duration from the trace start (3600, 7d)."),
    end: Optional[str] = typer.Option(None, "--end", help="Replay submissions before this: a date (a bare date "
                                      "includes that day) or seconds/duration from the trace start."),
    until: Optional[str] = typer.Option(None, "--until", metavar="T", help="Stop at simulated time T (seconds or "
                                        "36h, 2d, from the first submission), or once the GPUs the submitted "
                                        "jobs ask for reach a share of the cluster's (100%: arrived demand equals "
                                        "capacity), and report the state then."),
    nodes: Optional[int] = typer.Option(None, "--nodes", min=1, help="Identical nodes (with --gpus-per-node)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=0, help="GPUs per node with --nodes."),
    cpus_per_node: Optional[str] = typer.Option(None, "--cpus-per-node", help="CPUs per node (default 8 per GPU)."),
    memory_per_node: Optional[str] = typer.Option(None, "--memory-per-node",
                                                  help="Memory per node, e.g. 512Gi (default 64Gi per GPU)."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", metavar="FILE", help="Heterogeneous nodes: a YAML "
                                           "file with nodes: [{name, count, resources, labels}] or a platform "
                                           "file (its node_pools)."),
    platform: Optional[Path] = typer.Option(None, "--platform", metavar="FILE", help="Tenant quotas and the "
                                            "cuberay policy's scheduler settings from a platform file (its "
                                            "node_pools are the cluster unless --nodes/--cluster); default: "
                                            "guarantees proportional to GPU-time, no caps."),
    policies: list[str] = typer.Option(["cuberay"], "--policy", help=f"Repeatable: {' | '.join(POLICIES)}; "
                                       f"each replays the same trace (one table column or JSON object each)."),
    placements: list[str] = typer.Option([], "--placement", help=f"Repeatable: {' | '.join(p.value for p in Placement)}"
                                         f"; every job is placed so (default: the trace's, pack), one replay "
                                         f"per policy and placement."),
    checkpoint_interval: str = typer.Option("30m", "--checkpoint-interval", help="A preempted job keeps progress "
                                            "up to its last checkpoint (0: none kept)."),
    restart_cost: str = typer.Option("60s", "--restart-cost", help="Allocated, useless time when a preempted "
                                     "job starts again."),
    distance_cost: float = typer.Option(0.0, "--distance-cost", min=0.0, metavar="K", help="Gangs placed wider "
                                        "than their size needs run slower, per topology level crossed (the "
                                        "platform file's spec.topology): K times the default slowdowns over 1 "
                                        "(1: the defaults, host 1.47x, each wider level 2.29x); 0: no cost."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE.png", help="Write JCT CDF, GPU allocation "
                                        "and queue length plots (needs matplotlib)."),
    output: Format = output_option(),
) -> None:
    """Replay TRACE on a simulated cluster through the real admission code; compare policies side by side."""
    names = _policy_names(policies)
    layouts = placement_names(placements) or [None]
    ckpt, restart = seconds(checkpoint_interval, "--checkpoint-interval"), seconds(restart_cost, "--restart-cost")
    stop, demand = until_option(until)
    plat = load_platform(platform) if platform else None
    err = error_console()
    with err.status(f"loading {trace} ..."):
        jobs = load_trace(trace, fmt, start, end)
        nodes_ = _cluster(nodes, gpus_per_node, cpus_per_node, memory_per_node, cluster, plat)
    if not jobs:
        raise SpecError(f"no jobs submitted in the window (--start {start}, --end {end}); widen it",
                        file=str(trace))
    quotas = tenant_quotas(plat) if plat else None
    _warn_unknown(jobs, quotas)
    err.print(f"{len(jobs):,} jobs from {trace}; {_nodes_text(nodes_)}", highlight=False)
    distance = DistanceCost().scaled(distance_cost) if distance_cost > 0 else None
    reports = run_all([Replay(jobs, nodes_, quotas, name, plat, ckpt, restart, stop, demand, layout, distance)
                       for name in names for layout in layouts])
    if plot is not None:
        from cuberay.platform.sim.plot import plot_reports

        plot_reports(reports, plot, title=f"{trace.name}: {len(jobs):,} jobs on {_nodes_text(nodes_)}")
        err.print(f"wrote {plot}", highlight=False)
    _emit(reports, output, until=until is not None,
          near=distance is not None or (plat is not None and plat.spec.topology is not None))


def _nodes_text(nodes: Sequence[NodeSpec]) -> str:
    gpus = sum(n.capacity.get("GPU", 0.0) for n in nodes)
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}, {gpus:g} GPUs"


def until_option(value: str | None) -> tuple[float | None, float | None]:
    """``--until``: (simulated seconds, None) for a time, (None, share of GPUs) for ``100%``."""
    if value is None:
        return None, None
    text = value.strip()
    if not text.endswith("%"):
        return seconds(text, "--until"), None
    try:
        share = float(text[:-1]) / 100
    except ValueError:
        share = float("nan")
    if not share > 0 or share == float("inf"):
        raise SpecError(f"--until {value!r}: a demand stop is a percentage above 0 of the cluster's GPUs, "
                        f"e.g. 100%; or give a time such as 36h")
    return None, share


def placement_names(values: Sequence[str]) -> list[str]:
    """``--placement`` values, checked against the placement policies."""
    known = [p.value for p in Placement]
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    for name in names:
        if name not in known:
            raise SpecError(f"--placement {name!r} is not a placement policy; choose from {', '.join(known)} "
                            f"(repeat --placement to compare several)")
    return list(dict.fromkeys(names))


def _policy_names(values: Sequence[str]) -> list[str]:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    for name in names:
        if name not in POLICIES:
            raise SpecError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)} (repeat --policy for "
                            f"several)")
    return list(dict.fromkeys(names))


def _cluster(nodes: int | None, gpus: int, cpus: str | None, memory: str | None, cluster: Path | None,
             plat: Platform | None) -> list[NodeSpec]:
    if cluster is not None and nodes is not None:
        raise SpecError("--cluster and --nodes both describe the cluster; give one")
    if cluster is not None:
        from cuberay.platform.sim.cluster import load_cluster

        return load_cluster(cluster)
    if nodes is not None:
        return uniform_cluster(nodes, gpus, _option(parse_cpu, cpus, "--cpus-per-node"),
                               _option(parse_memory, memory, "--memory-per-node"))
    if plat is not None and plat.spec.node_pools:
        from cuberay.platform.sim.cluster import cluster_from_pools

        return cluster_from_pools(plat.spec.node_pools)
    raise SpecError("no cluster to replay on; give --nodes N --gpus-per-node G, --cluster nodes.yaml, or a "
                    "--platform file with node_pools")


def _option(parse: Callable[[str], float], value: str | None, flag: str) -> float | None:
    try:
        return None if value is None else parse(value)
    except SpecError as exc:
        raise SpecError(f"{flag}: {exc.reason}") from None


def _warn_unknown(jobs: Sequence[TraceJob], quotas: dict[str, TenantQuota] | None) -> None:
    if quotas is None:
        return
    missing = unknown_tenants(jobs, quotas)
    if missing:
        listed = ", ".join(f"{t} ({n} jobs)" for t, n in sorted(missing.items(), key=lambda kv: -kv[1])[:5])
        error_console().print(f"[yellow]warning:[/] the platform has no tenant {listed}"
                              f"{' ...' if len(missing) > 5 else ''}; those jobs are rejected", highlight=False)


def _emit(reports: Sequence[Report], output: Format, until: bool, near: bool = False) -> None:
    if output == Format.table:
        emit(table_rows(reports, until, near), output, title="cuberay sim")
        return
    data = [r.to_dict() for r in reports]
    emit(data[0] if len(data) == 1 else data, output)
