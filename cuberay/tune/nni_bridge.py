"""NNI's trial API inside Ray Tune trials, through NNI's own channel extension points.

Function trials (in the Tune trial's process): a ``TrialCommandChannel`` set with
``nni.runtime.trial_command_channel.set_default_trial_command_channel`` answers
``nni.get_next_parameter()`` with the trial's config and turns each
``nni.report_intermediate_result`` / ``report_final_result`` into a ``tune.report``,
so Tune's schedulers see every intermediate value. ``nni.trial`` keeps the
parameters, ids and the intermediate sequence in module state, frozen from the
environment at first import; the bridge resets them for every trial, so an
actor that Tune reuses starts each trial clean.

Command trials (a separate process, run unchanged through a shell as NNI runs
``trialCommand``): NNI's own file channel, exactly as NNI's local training service
drives it: ``NNI_PLATFORM=local``, the parameters in ``$NNI_SYS_DIR/parameter.cfg``
before the process starts, metrics framed in ``$NNI_SYS_DIR/.nni/metrics``, read
here while it runs. The trial needs only ``nni`` itself, in whatever Python it uses.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from nni.runtime.trial_command_channel import TrialCommandChannel

from cuberay.errors import SpecError
from cuberay.runtime.process import kill_group
from cuberay.tune.nni_searcher import FINAL_KEY, metric_value

TUNE_RESERVED = ("trial_id", "done", "training_iteration", "time_total_s", "timestamp", "config", "experiment_id")
POLL_S = 0.1         # how often a command trial's metrics file is read
KILL_GRACE_S = 3.0


class TrialFailed(RuntimeError):
    """A trial ended without the result it owes (non-zero exit, no metric reported)."""


def to_tune_result(metric: str, value: Any, *, final: bool, sequence: int) -> dict[str, Any]:
    """The Tune result for one NNI report: the scalar under ``metric``, other dict entries kept."""
    scalar = metric_value(value)
    if scalar is None:
        raise TrialFailed(f"the trial reported {value!r} for {metric!r}; NNI metrics are a number or a dict "
                          f"with a numeric 'default' (nni.report_final_result(0.93) or {{'default': 0.93}})")
    result: dict[str, Any] = {}
    if isinstance(value, Mapping):
        for key, extra in value.items():
            if key != "default" and isinstance(extra, (int, float, str, bool)):
                # Tune overwrites its own keys; keep the trial's under a prefixed name.
                result[f"nni_{key}" if key in TUNE_RESERVED or key == metric else key] = extra
    result.update({metric: scalar, FINAL_KEY: final, "nni_sequence": sequence})
    return result


# ---------------------------------------------------------------------- in-process trials


class TuneTrialChannel(TrialCommandChannel):
    """Answers NNI's trial API for one trial: its config in, its reports out."""

    def __init__(self, parameters: dict, parameter_id: int, metric: str, report: Callable[[dict], None]):
        self.record = {"parameter_id": parameter_id, "parameter_source": "algorithm",
                       "parameters": parameters, "parameter_index": 0}
        self.metric, self.report = metric, report
        self.given = False
        self.reports = {"PERIODICAL": 0, "FINAL": 0}

    def receive_parameter(self) -> dict | None:
        if self.given:
            return None  # one parameter set per trial, as NNI's local channel answers
        self.given = True
        return self.record

    def send_metric(self, type: str, parameter_id: Any, trial_job_id: Any, sequence: int,  # noqa: A002
                    value: Any) -> None:
        self.reports[type] = self.reports.get(type, 0) + 1
        self.report(to_tune_result(self.metric, value, final=type == "FINAL", sequence=sequence))


def _trial_ids() -> tuple[str, str, int]:
    """(experiment id, trial id, sequence number) of the running Tune trial."""
    from ray import tune

    ctx = tune.get_context()
    trial_id = ctx.get_trial_id() or "STANDALONE"
    return ctx.get_experiment_name() or "STANDALONE", trial_id, trial_index(ctx.get_trial_dir() or "", trial_id)


def trial_index(trial_dir: str, trial_id: str) -> int:
    """Tune's trial number: trial directories are named ``<trainable>_<trial id>_<number>_<params>...``."""
    found = re.search(rf"_{re.escape(trial_id)}_(\d+)", Path(trial_dir).name)
    return int(found.group(1)) if found else 0


def install_channel(channel: Any, experiment_id: str, trial_id: str, sequence_id: int) -> None:
    """Make ``channel`` serve NNI's trial API in this process and reset ``nni.trial``'s per-trial state."""
    import nni.trial
    from nni.runtime.trial_command_channel import set_default_trial_command_channel

    set_default_trial_command_channel(channel)
    nni.trial._params = None
    nni.trial._intermediate_seq = 0
    nni.trial._experiment_id, nni.trial._trial_id, nni.trial._sequence_id = experiment_id, trial_id, sequence_id
    os.environ.update(NNI_EXP_ID=experiment_id, NNI_TRIAL_JOB_ID=trial_id, NNI_TRIAL_SEQ_ID=str(sequence_id))


def takes_config(func: Callable[..., Any]) -> bool:
    """Ray Tune style ``func(config)`` (True) or NNI style ``func()`` calling nni.get_next_parameter (False)."""
    params = [p for p in inspect.signature(func).parameters.values()
              if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 1


def run_function_trial(func: Callable[..., Any], config: dict, *, metric: str,
                       report: Callable[[dict], None], ids: tuple[str, str, int] | None = None) -> None:
    """Run one function trial with NNI's trial API bound to ``config`` and ``report``."""
    experiment_id, trial_id, seq = ids or _trial_ids()
    channel = TuneTrialChannel(dict(config), seq, metric, report)
    install_channel(channel, experiment_id, trial_id, seq)
    if takes_config(func):
        func(dict(config))
        return
    func()
    if not channel.given:
        raise TrialFailed("the trial function takes no config and never called nni.get_next_parameter(); "
                          "call it first, or take the config as the function's argument (Ray Tune style)")
    if not any(channel.reports.values()):
        raise TrialFailed(f"the trial reported no {metric!r}: call nni.report_final_result(value) "
                          f"(and nni.report_intermediate_result(value) per epoch)")


# ---------------------------------------------------------------------- command trials


def write_parameters(sys_dir: Path, parameters: dict, parameter_id: int) -> None:
    """``parameter.cfg`` as NNI's local training service writes it."""
    import nni

    sys_dir.mkdir(parents=True, exist_ok=True)
    record = {"parameter_id": parameter_id, "parameter_source": "algorithm", "parameters": parameters,
              "parameter_index": 0}
    (sys_dir / "parameter.cfg").write_text(nni.dump(record))


class MetricsReader:
    """Reads the ``ME<6-digit length><json>`` frames NNI's file channel appends to ``.nni/metrics``."""

    def __init__(self, path: Path):
        self.path, self.offset, self.buffer = path, 0, b""

    def read(self) -> list[dict]:
        import nni

        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        self.buffer += chunk
        out = []
        while len(self.buffer) >= 8 and self.buffer[:2] == b"ME":
            size = int(self.buffer[2:8])
            if len(self.buffer) < 8 + size:
                break  # a frame still being written
            frame = nni.load(self.buffer[8:8 + size].decode("utf8"))
            self.buffer = self.buffer[8 + size:]
            if frame.get("type") in ("PERIODICAL", "FINAL"):
                frame["value"] = nni.load(frame["value"]) if isinstance(frame["value"], str) else frame["value"]
                out.append(frame)
        return out


def trial_env(sys_dir: Path, experiment_id: str, trial_id: str, sequence_id: int,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment NNI's local training service gives a trial process."""
    env = {k: v for k, v in (base if base is not None else os.environ).items()
           if not k.startswith("NNI_") and k not in ("MULTI_PHASE", "REUSE_MODE")}
    env.update(NNI_PLATFORM="local", NNI_EXP_ID=experiment_id, NNI_TRIAL_JOB_ID=trial_id,
               NNI_TRIAL_SEQ_ID=str(sequence_id), NNI_SYS_DIR=str(sys_dir), NNI_OUTPUT_DIR=str(sys_dir))
    return env


def _die_with_parent() -> None:
    # The shell dies with the thread that started it (an actor killed mid-trial included).
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_command_trial(command: str, config: dict, *, metric: str, report: Callable[[dict], None],
                      sys_dir: Path, code_dir: str | None = None, env: Mapping[str, str] | None = None,
                      ids: tuple[str, str, int] | None = None) -> None:
    """Run ``command`` as an NNI trial with ``config``; forward its metrics to ``report`` as they appear."""
    experiment_id, trial_id, seq = ids or _trial_ids()
    sys_dir = Path(sys_dir)
    write_parameters(sys_dir, dict(config), seq)
    cwd = resolve_code_dir(code_dir)
    log_path = sys_dir / "trial.log"
    reader = MetricsReader(sys_dir / ".nni" / "metrics")
    full_env = {**trial_env(sys_dir, experiment_id, trial_id, seq), **dict(env or {})}
    with open(log_path, "ab") as log:
        child = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=full_env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
    reported = 0
    try:
        while True:
            code = child.poll()
            for frame in reader.read():  # after poll: a frame written just before exit is still read
                reported += 1
                report(to_tune_result(metric, frame["value"], final=frame["type"] == "FINAL",
                                      sequence=int(frame.get("sequence") or 0)))
            if code is not None:
                break
            time.sleep(POLL_S)
    finally:
        _stop(child)  # also what the trial left running in its process group
    if code != 0:
        raise TrialFailed(f"trial command exited with code {code}: {command!r} (in {cwd}); last output:\n"
                          f"{_tail(log_path)}")
    if not reported:
        raise TrialFailed(f"the trial command reported no {metric!r}: it must call "
                          f"nni.report_final_result(value); last output:\n{_tail(log_path)}")


def resolve_code_dir(code_dir: str | None) -> str:
    """The trial's working directory: absolute as given, else relative to where the job started."""
    origin = os.environ.get("TUNE_ORIG_WORKING_DIR") or os.getcwd()  # Tune chdirs trials to their own dir
    path = Path(code_dir or ".")
    path = path if path.is_absolute() else Path(origin) / path
    if not path.is_dir():
        raise SpecError(f"trial code directory {str(path)!r} does not exist on this node; ship the code with "
                        f"runtime_env.working_dir or give a path every node has", path="code_dir")
    return str(path)


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is not None:  # it exited: what it left running in its group goes too
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    kill_group(child.pid, KILL_GRACE_S, wait=child)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"
