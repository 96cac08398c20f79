"""Platform commands: ``up``, ``down``, ``tenants`` and ``demo``."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from cuberay.cli import app, views
from cuberay.cli.output import Format, emit, error_console, output_option
from cuberay.errors import JobFailedError, PlatformNotRunningError, SpecError
from cuberay.platform import client
from cuberay.platform.policy.states import JobState

API_URL_ENV = "CUBERAY_API_URL"  # where `cuberay env` puts the head's HTTP API

if TYPE_CHECKING:
    from cuberay.platform.demo import DemoResult, Snapshot


@app.command()
def up(
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE",
        help="Platform file with tenants and quotas (default: configs/platform.yaml)."),
    address: Optional[str] = typer.Option(
        None, "--address", metavar="ADDR",
        help="Install the controller on this running Ray cluster instead of starting a local one."),
    console_port: Optional[int] = typer.Option(
        None, "--console-port", metavar="PORT", min=1, max=65535,
        help="With --address: serve the web console and HTTP API on this port of that cluster's head, on every "
             "interface (a Kubernetes head pod's; `cuberay kube render` sets 8266). The local head always serves "
             "them, on a free port of 127.0.0.1."),
    tenant_cluster: Optional[str] = typer.Option(
        None, "--tenant-cluster", metavar="TENANT",
        help="Run this tenant's Ray cluster here the way `cuberay kube render` shapes it for KubeRay: a head "
             "that runs no work, with the tenant's own platform file, and Ray's autoscaler adding and removing "
             "nodes of its worker groups as gangs wait and nodes idle."),
    idle_timeout: Optional[float] = typer.Option(
        None, "--idle-timeout", metavar="SECONDS", min=1,
        help="With --tenant-cluster: remove a node idle this long (default: the RayCluster's, 60 s)."),
    output: Format = output_option(),
) -> None:
    """Start a local Ray head with its dashboard and the cuberay controller; print the dashboard URL."""
    if tenant_cluster is not None or idle_timeout is not None:
        if console_port:
            raise SpecError("--console-port is for a cluster named with --address; a tenant's cluster here serves "
                            "its console on a free port of 127.0.0.1 (`cuberay console` prints it)",
                            path="--console-port")
        return _tenant_cluster_up(platform, address, tenant_cluster, idle_timeout, output)
    if console_port and not address:
        raise SpecError("--console-port is for a cluster named with --address; the local head serves its console "
                        "on a free port of 127.0.0.1 (`cuberay console` prints it)", path="--console-port")
    where = f"the Ray cluster at {address}" if address else "a local Ray head"
    err = error_console()
    with err.status(f"starting the cuberay controller on {where} ..."):
        url = client.up(str(platform) if platform else None, address, console_port)
    facts = {"dashboard_url": url, **_where_things_go(platform, local=address is None)}
    if output != Format.table:
        emit(facts, output)
        return
    print(f"Ray dashboard: {url}")
    if address and console_port:
        print(f"Console:       port {console_port} of the head, on every interface (from a laptop: `kubectl "
              f"port-forward` it, then open http://127.0.0.1:{console_port}/)")
    if facts.get("api_url"):
        print(f"Console:       {facts['api_url']}/ (sign in with the cluster token and your user name; "
              f"`cuberay console` prints this again)")
        print(f"cuberay API:   {facts['api_url']}/api/v1 (JSON, the cluster token as a bearer token; "
              f"{facts['api_url']}/api/v1/openapi.json lists every call)")
    elif facts.get("api_error"):
        err.print(f"[yellow]warning:[/] {escape(str(facts['api_error']))}; commands reach the platform over Ray "
                  f"meanwhile (slower); `cuberay up` again tries another port", highlight=False)
    if facts.get("metrics_url"):
        print(f"Metrics:       {facts['metrics_url']} (Prometheus text, cuberay_* series; a Grafana "
              f"dashboard of them: configs/grafana/cuberay.json)")
    print(f"Storage:       {facts['storage']} (database, logs, checkpoints; from {facts['storage_from']})")
    if facts.get("head_cpus"):
        print(f"Local head:    {facts['head_cpus']} logical CPUs ({os.cpu_count()} cores here; at least the node "
              f"pools' CPUs, so what `cuberay spec validate --platform` says fits is admitted here too)")
    err.print(next_steps(ray_job_env(url, local=address is None), _example_job()), highlight=False,
              soft_wrap=True)


def _tenant_cluster_up(platform: Optional[Path], address: Optional[str], tenant: Optional[str],
                       idle_timeout: Optional[float], output: Format) -> None:
    """``cuberay up --tenant-cluster TENANT``: one tenant's KubeRay shape on this machine."""
    from cuberay.kuberay import tenant_local

    if tenant is None:
        raise SpecError("--idle-timeout is for a tenant's cluster: add --tenant-cluster TENANT",
                        path="--idle-timeout")
    if address:
        raise SpecError("--tenant-cluster starts a local cluster; it cannot be combined with --address (on "
                        "Kubernetes, `cuberay kube render` writes the tenant's RayCluster)", path="--tenant-cluster")
    with error_console().status(f"starting tenant {escape(tenant)}'s Ray cluster here, with Ray's autoscaler ..."):
        facts = tenant_local.up(str(platform) if platform else None, tenant, idle_timeout)
    if output != Format.table:
        emit(facts, output)
        return
    print(f"Tenant {tenant}'s Ray cluster is up: a head that runs no work, Ray's autoscaler and these worker "
          f"groups (no node yet beyond each group's minimum):")
    for g in facts["worker_groups"]:
        print(f"  {g['group']:<12} {g['min']}..{g['max']} nodes of {views.resources(g['resources'])}")
    print(f"Idle nodes go after {facts['idle_timeout_s']:g} s. Ray dashboard: {facts['dashboard_url']}")
    print(f"The tenant's platform file (on Kubernetes, its ConfigMap): {facts['platform_file']}")
    error_console().print("Next: `cuberay submit FILE`, `cuberay queue` (a gang waiting for nodes says which), "
                          "`cuberay down` stops the head and every node.", highlight=False, soft_wrap=True)


def _where_things_go(platform: Optional[Path], *, local: bool) -> dict[str, object]:
    """Where this platform keeps its data and why, and the local head's metrics endpoint and CPUs."""
    from cuberay.home import where_home
    from cuberay.platform.control import head as controller_head
    from cuberay.platform.spec import load_platform

    path = client.find_platform_file(platform)
    plat = load_platform(path)
    facts: dict[str, object] = {
        "storage": str(plat.storage_path()),
        "storage_from": f"spec.storage of {path}" if plat.spec.storage else f"cuberay's home: {where_home()}"}
    state = controller_head.read_state() if local else None
    if state:
        facts.update({"metrics_url": state.get("metrics_url"), "head_cpus": state.get("cpus"),
                      "api_url": state.get("api_url"), "api_error": state.get("api_error")})
    return facts


def _example_job() -> str:
    """An example spec by absolute path: a Ray Job's driver does not start in the caller's directory."""
    task = Path("configs/jobs/task.yaml")
    return str(task.resolve()) if task.is_file() else "/path/to/job.yaml"


def ray_job_env(dashboard_url: str, *, local: bool) -> dict[str, str]:
    """What a shell needs for `ray job submit` against this head: its address and, for the local head, token auth.

    The head that `cuberay up` starts uses Ray's token authentication; Ray's own
    CLI sends the token (from ~/.ray/auth_token) only when RAY_AUTH_MODE=token.
    """
    return {"RAY_AUTH_MODE": "token", "RAY_ADDRESS": dashboard_url} if local else {"RAY_ADDRESS": dashboard_url}


def next_steps(env: dict[str, str], example: str) -> str:
    """The block `cuberay up` ends with: commands that work as written on the bundled local platform."""
    exports = "\n".join(f"  export {key}={value}" for key, value in env.items())
    auth = "" if "RAY_AUTH_MODE" in env else \
        "\n  (and export RAY_AUTH_MODE=token if that cluster uses Ray's token authentication)"
    how = "run `eval \"$(cuberay env)\"`, or paste into your shell" if "RAY_AUTH_MODE" in env else \
        "paste into your shell"
    login = f"The dashboard asks for a token at login: paste {_token_location()}.\n" if "RAY_AUTH_MODE" in env else ""
    return ("cuberay is up. Next:\n"
            "  cuberay tenants\n"
            "  cuberay submit configs/jobs/train-ddp.yaml --wait\n"
            "  cuberay queue\n"
            f"For `ray job submit -- cuberay run FILE`, first {how}:\n"
            f"{exports}{auth}\n"
            f"  ray job submit -- cuberay run {example}\n"
            f"{login}"
            "Stop with `cuberay down`.")


def _token_location() -> str:
    """Where the head's token is: Ray reads RAY_AUTH_TOKEN, then RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "the value of RAY_AUTH_TOKEN (set in this shell)"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or "~/.ray/auth_token"
    return f"the one in {path} (`cat {path}`)"


@app.command()
def env(output: Format = output_option(help="table (shell lines for eval) | json | yaml (the variables)")) -> None:
    """Print the shell lines that point Ray's own CLI (`ray job submit`, `ray status`) and HTTP tools
    (CUBERAY_API_URL) at the local head `cuberay up` started: run `eval "$(cuberay env)"`."""
    from cuberay.platform.control import head as controller_head

    state = controller_head.read_state()
    if state is None:
        raise PlatformNotRunningError("no local head from `cuberay up` is running; start one with `cuberay up` "
                                      "(for a cluster of your own, export RAY_ADDRESS=<its dashboard URL>)")
    variables = ray_job_env(state["dashboard_url"], local=True)
    if state.get("api_url"):
        variables[API_URL_ENV] = state["api_url"]  # for curl and other tools; the CLI reads the state itself
    if output != Format.table:
        emit(variables, output)
        return
    for key, value in variables.items():
        print(f"export {key}={shlex.quote(value)}")


@app.command()
def console(
    open_it: bool = typer.Option(False, "--open", help="Open it in this machine's web browser too."),
    output: Format = output_option(),
) -> None:
    """Print the web console's URL for the local head `cuberay up` started (and how to sign in)."""
    from cuberay.platform.control import head as controller_head

    state = controller_head.read_state()
    if state is None:
        raise PlatformNotRunningError("no local head from `cuberay up` is running, so no console either; start "
                                      "one with `cuberay up`")
    if not state.get("api_url"):
        why = state.get("api_error") or "its API server did not start"
        raise PlatformNotRunningError(f"the local head serves no console: {why}; run `cuberay up` again to start it")
    url = f"{state['api_url']}/"
    if output != Format.table:
        emit({"console_url": url, "dashboard_url": state.get("dashboard_url")}, output)
    else:
        print(url)
        error_console().print(f"Sign in with the cluster token ({_token_location()}) and the user name you act as.",
                              highlight=False, soft_wrap=True)
    if open_it:
        import webbrowser

        if not webbrowser.open(url):
            error_console().print("[yellow]warning:[/] no web browser found here: open the URL above yourself",
                                  highlight=False)


@app.command()
def down() -> None:
    """Stop the controller, and the local Ray head that `cuberay up` started with every process it started."""
    if client.down():
        error_console().print("cuberay is down.")
    else:
        error_console().print("Nothing to stop: no local head from `cuberay up` and no cuberay controller found "
                              "(for one on another cluster, set RAY_ADDRESS to its GCS address).", highlight=False)


@app.command()
def tenants(
    output: Format = output_option(),
) -> None:
    """Each tenant's guaranteed and max quota, what it uses now, and how much of that is borrowed."""
    usages = client.tenants()
    if output != Format.table:
        emit(views.plain(usages), output)
        return
    emit(views.tenant_rows(usages), output, columns=views.TENANT_COLUMNS)


@app.command()
def demo(
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE", help="Platform file (default: configs/platform.yaml)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Cancel what is left (and shut down) after this "
                                                            "many seconds."),
) -> None:
    """Start a local platform, run four example jobs and a pipeline while showing the queue, serve the model.

    Submits a 2-worker DDP TrainJob (an MLP on sklearn's digits), a command-mode
    Task, a job that must wait for its tenant's quota, a short NNI search and a
    train -> evaluate pipeline; then serves the trained model on Ray Serve and
    queries it. Runs in a scratch
    directory: a platform started with `cuberay up` is left alone. Exit 1 if a
    job did not succeed.
    """
    from cuberay.platform import demo as scenario

    err = error_console()
    started = time.monotonic()
    if err.is_terminal:
        with Live(Text("starting a local Ray head and the cuberay controller ..."), console=err,
                  refresh_per_second=4, transient=True) as live:
            result = scenario.run_demo(platform_file=str(platform) if platform else None, timeout_s=timeout,
                                       on_tick=lambda snap: live.update(_demo_view(snap)))
    else:  # a log, not a screen: one line per change
        err.print("starting a local Ray head and the cuberay controller ...")
        result = scenario.run_demo(platform_file=str(platform) if platform else None, timeout_s=timeout,
                                   on_tick=_demo_lines(err))
    emit(_result_rows(result), Format.table, columns=("job", "state", "waited", "runtime", "result"),
         title="cuberay demo: results")
    if result.accuracy is not None:
        print(f"digits DDP test accuracy: {result.accuracy:.3f}")
    if result.pipeline is not None:
        steps = ", ".join(f"{s.name} {s.state.value}" + (f" (accuracy {s.outputs['accuracy']})"
                                                          if "accuracy" in s.outputs else "")
                          for s in result.pipeline_steps)
        print(f"pipeline {result.pipeline.id}: {result.pipeline.state.value}: {steps}")
    if result.served is not None:
        s = result.served
        print(f"served as {s.app} at {s.url}: {s.rows} held-out digits in one request, {s.latency_ms:.0f} ms, "
              f"accuracy {s.accuracy:.3f} (the app is deleted again)")
    print(f"Ray dashboard (while the demo ran): {result.dashboard_url}")
    if result.metrics_seen:
        print(f"cuberay metrics on Ray's Prometheus endpoint: {', '.join(result.metrics_seen)}")
    err.print(f"demo took {time.monotonic() - started:.0f} s; the platform is shut down.", highlight=False)
    if result.failed:
        raise JobFailedError(f"demo job(s) did not succeed: {', '.join(result.failed)}; the results table "
                             f"shows why (run again with CUBERAY_DEBUG=1 for details)")


def _demo_view(snapshot: Snapshot) -> Group | Text:
    """The live queue table, then the demo jobs that already ended."""
    if snapshot.note:
        return Text(snapshot.note)
    title = f"cuberay queue  ({views.span(snapshot.elapsed_s)})"
    parts = [views.table(views.queue_rows(snapshot.queue), views.QUEUE_COLUMNS, title=title)]
    done = [f"{r.id} {r.state.value}" for r in snapshot.records if r.state.is_terminal]
    if done:
        parts.append(Text("finished: " + ", ".join(done)))
    return Group(*parts)


def _demo_lines(err: Console) -> Callable[[Snapshot], None]:
    """An on_tick that prints each demo job's state line when it changes."""
    from cuberay.cli.progress import waiting_line

    last: dict[str, str] = {}

    def tick(snapshot: Snapshot) -> None:
        if snapshot.note:
            err.print(f"{views.span(snapshot.elapsed_s):>4} {snapshot.note}", highlight=False)
            return
        entries = {e.job_id: e for e in snapshot.queue}
        for record in snapshot.records:
            line = waiting_line(record, entries.get(record.id))
            if last.get(record.id) != line:
                last[record.id] = line
                err.print(f"{views.span(snapshot.elapsed_s):>4} {record.id}: {line}", highlight=False,
                          soft_wrap=True)
    return tick


def _result_rows(result: DemoResult) -> list[dict[str, str]]:
    rows = []
    for record in result.records:
        row = views.job_row(record)
        waited = None if record.start_time is None else record.start_time - record.submit_time
        row["waited"] = views.span(waited)
        if record.id in result.waited:
            row["result"] = f"waited for: {result.waited[record.id]}"
        elif record.state == JobState.SUCCEEDED and record.id == result.trained and result.accuracy is not None:
            row["result"] = f"test accuracy {result.accuracy:.3f}"
        elif record.state == JobState.SUCCEEDED:  # e.g. a TuneJob's best value and config, and its counts
            from cuberay import kinds  # the demo's summary: the other commands here need no registry

            kind = kinds.get(record.kind)
            row["result"] = (kind.summary(record.message or "") if kind is not None else None) or "ok"
        else:  # why it failed
            row["result"] = record.message or record.reason or ""
        rows.append(row)
    return rows
