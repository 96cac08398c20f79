"""An NNI experiment file (``nnictl create --config``) as a TuneJob.

NNI field              TuneJob field
searchSpace(File)      search_space (a file is read, relative to the config, and inlined)
trialCommand           command (run unchanged through a shell, NNI's file channel)
trialCodeDirectory     code_dir (relative to the config file, as NNI reads it)
trialConcurrency       workers and max_concurrent_trials
trialGpuNumber         resources.gpu of each trial
maxTrialNumber         num_samples
maxExperimentDuration  max_runtime
tuner {name, classArgs}  algorithm nni:<name>, algorithm_args; optimize_mode -> mode, seed -> seed
assessor Medianstop    scheduler median_stopping (start_step -> grace_period)

The metric is NNI's ``default``: the number a trial reports (or the ``default``
key of the dict it reports). Fields that change what NNI runs but have no
counterpart here are refused by name; the training service and NNI's own logging
settings are accepted and have no effect (trials run on the cluster, logs go to Ray).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from cuberay.errors import SpecError
from cuberay.tune.schedulers import from_nni_assessor

TUNERS = {"tpe": "nni:tpe", "random": "nni:random", "anneal": "nni:anneal", "evolution": "nni:evolution",
          "gridsearch": "nni:gridsearch"}
# The tuner's own default direction when classArgs has no optimize_mode (NNI's class defaults).
DEFAULT_MODE = {"nni:tpe": "min", "nni:anneal": "min", "nni:evolution": "max"}
NO_EFFECT = {"experiment_type", "training_service", "debug", "log_level", "experiment_working_directory",
             "nni_manager_ip", "tuner_gpu_indices"}
MAPPED = {"experiment_name", "search_space", "search_space_file", "trial_command", "trial_code_directory",
          "trial_concurrency", "trial_gpu_number", "max_trial_number", "max_experiment_duration", "tuner",
          "assessor"}
REFUSED = {"advisor": "advisors (BOHB, Hyperband) are not supported; use tuner TPE with assessor Medianstop, or "
                      "a TuneJob with scheduler: hyperband",
           "use_annotation": "NNI annotations are not supported; call nni.get_next_parameter() in the trial",
           "max_trial_duration": "a per-trial time limit is not supported; drop it (maxExperimentDuration limits "
                                 "the whole search)",
           "shared_storage": "NNI shared storage is not supported; ship the code with trialCodeDirectory"}


def no_effect(config: Mapping[str, Any]) -> list[str]:
    """The fields of ``config`` (as written) that are accepted and change nothing here, so the import can say so:
    trials run on the job's gang whatever the training service, and their logs go to Ray."""
    return [key for key, value in config.items() if snake(key) in NO_EFFECT and value not in (None, False)]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise SpecError(f"cannot read the NNI experiment file: {err.strerror}", file=str(path)) from None
    except yaml.YAMLError as err:
        raise SpecError(f"not YAML: {err}", file=str(path)) from None
    if not isinstance(data, Mapping):
        raise SpecError("an NNI experiment file is a mapping (experimentName, searchSpaceFile, trialCommand, ...)",
                        file=str(path))
    return dict(data)


def to_tune_job(config: Mapping[str, Any], config_file: str | Path, *, tenant: str | None = None,
                name: str | None = None) -> dict[str, Any]:
    """The TuneJob (as a dict, not yet validated) that runs the NNI experiment ``config``."""
    file = str(config_file)
    base = Path(config_file).resolve().parent
    cfg = {snake(k): v for k, v in config.items()}
    original = {snake(k): k for k in config}
    for key in cfg:
        if key in REFUSED and cfg[key] not in (None, False):
            raise SpecError(REFUSED[key], file=file, path=original[key])
        if key not in MAPPED | NO_EFFECT | set(REFUSED):
            raise SpecError(f"NNI field {original[key]!r} is not supported by cuberay tune import; supported: "
                            f"{', '.join(sorted(_camel(k) for k in MAPPED))}", file=file, path=original[key])
    if not cfg.get("trial_command"):
        raise SpecError("trialCommand is required: the command that runs one trial (e.g. python3 trial.py)",
                        file=file, path="trialCommand")
    if not cfg.get("max_trial_number"):
        raise SpecError("maxTrialNumber is required here: the number of trials to run", file=file,
                        path="maxTrialNumber")
    algorithm, args, mode, seed = _tuner(cfg.get("tuner"), file)
    spec: dict[str, Any] = {
        "workers": int(cfg.get("trial_concurrency") or 1),
        "resources": {"cpu": "1", "gpu": str(cfg.get("trial_gpu_number") or 0)},
        "command": cfg["trial_command"],
        "code_dir": str((base / str(cfg.get("trial_code_directory") or ".")).resolve()),
        "search_space": _search_space(cfg, base, file),
        "num_samples": int(cfg["max_trial_number"]),
        "max_concurrent_trials": int(cfg.get("trial_concurrency") or 1),
        "metric": "default", "mode": mode, "algorithm": algorithm, "algorithm_args": args,
    }
    if seed is not None:
        spec["seed"] = seed
    if cfg.get("max_experiment_duration"):
        spec["max_runtime"] = cfg["max_experiment_duration"]
    if cfg.get("assessor"):
        assessor = cfg["assessor"]
        if not isinstance(assessor, Mapping) or not assessor.get("name"):
            raise SpecError("assessor needs a name (Medianstop)", file=file, path="assessor")
        try:
            spec["scheduler"], spec["scheduler_args"] = from_nni_assessor(
                str(assessor["name"]), assessor.get("classArgs") or assessor.get("class_args"))
        except SpecError as err:
            raise SpecError(err.reason, file=file, path=err.path) from None
    job_name = name or _dns(str(cfg.get("experiment_name") or Path(config_file).stem))
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "TuneJob",
            "metadata": {"name": job_name, **({"tenant": tenant} if tenant else {})}, "spec": spec}


def _tuner(tuner: Any, file: str) -> tuple[str, dict[str, Any], str, int | None]:
    if tuner is None:
        raise SpecError("tuner is required: {name: TPE, classArgs: {optimize_mode: maximize}}", file=file,
                        path="tuner")
    if not isinstance(tuner, Mapping) or not tuner.get("name"):
        raise SpecError("tuner needs a name (TPE, Random, Anneal, Evolution or GridSearch); custom tuner classes "
                        "(className/codeDirectory) are not supported", file=file, path="tuner")
    key = str(tuner["name"]).lower()
    if key not in TUNERS or tuner.get("className") or tuner.get("class_name"):
        raise SpecError(f"NNI tuner {tuner['name']!r} is not supported; use one of TPE, Random, Anneal, Evolution, "
                        f"GridSearch", file=file, path="tuner.name")
    algorithm = TUNERS[key]
    args = dict(tuner.get("classArgs") or tuner.get("class_args") or {})
    optimize = args.pop("optimize_mode", None)
    if optimize not in (None, "maximize", "minimize"):
        raise SpecError(f"optimize_mode must be maximize or minimize, got {optimize!r}", file=file,
                        path="tuner.classArgs.optimize_mode")
    mode = {"maximize": "max", "minimize": "min"}.get(optimize or "", DEFAULT_MODE.get(algorithm, "max"))
    seed = args.pop("seed", None)
    return algorithm, args, mode, seed


def _search_space(cfg: Mapping[str, Any], base: Path, file: str) -> dict[str, Any]:
    if cfg.get("search_space") is not None and cfg.get("search_space_file"):
        raise SpecError("set one of searchSpace and searchSpaceFile, not both", file=file, path="searchSpaceFile")
    if cfg.get("search_space") is not None:
        if not isinstance(cfg["search_space"], Mapping):
            raise SpecError("searchSpace must be a mapping of parameter names to {_type, _value}", file=file,
                            path="searchSpace")
        return dict(cfg["search_space"])
    if not cfg.get("search_space_file"):
        raise SpecError("searchSpaceFile (or an inline searchSpace) is required", file=file, path="searchSpaceFile")
    path = base / str(cfg["search_space_file"])
    try:
        data = yaml.safe_load(path.read_text())  # JSON is YAML
    except OSError as err:
        raise SpecError(f"cannot read search space file {str(path)!r}: {err.strerror}", file=file,
                        path="searchSpaceFile") from None
    if not isinstance(data, Mapping):
        raise SpecError(f"search space file {str(path)!r} is not a mapping of parameter names to {{_type, _value}}",
                        file=file, path="searchSpaceFile")
    return dict(data)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _dns(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return name or "nni-experiment"
