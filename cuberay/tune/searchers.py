"""The search algorithms a TuneJob names, as Ray Tune Searchers, and the slot wrapper that pins trials.

``nni:<tuner>`` is an ``NniSearcher``; Ray's own ``random`` and ``grid`` sample
the converted space with Ray Tune's variant generator (the same code Tune's
``BasicVariantGenerator`` runs). ``SlotSearcher`` wraps any of them and gives
each trial one of the gang's slots: the trial's resources carry the slot's node
as a label selector, so trials run only on the nodes admission chose, at most
one per slot.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from ray.tune.search import Searcher

from cuberay.errors import SpecError
from cuberay.tune import space as spaces
from cuberay.tune.nni_searcher import ALGORITHMS, NniSearcher
from cuberay.tune.searcher_state import PickledState

SLOT_KEY = "__cuberay_slot"
RAY_ALGORITHMS = ("random", "grid")


def algorithm_names() -> list[str]:
    return [f"nni:{a}" for a in ALGORITHMS] + list(RAY_ALGORITHMS)


def make_searcher(algorithm: str, search_space: Mapping[str, Any], *, metric: str, mode: str,
                  algorithm_args: Mapping[str, Any] | None = None, seed: int | None = None,
                  max_concurrent: int | None = None) -> Searcher:
    """The Searcher for ``algorithm`` (``nni:tpe`` ... or Ray's ``random`` / ``grid``)."""
    if algorithm.startswith("nni:"):
        args = dict(algorithm_args or {})
        include = bool(args.pop("include_intermediate_results", True))
        return NniSearcher(algorithm[4:], search_space, metric=metric, mode=mode, algorithm_args=args, seed=seed,
                           max_concurrent=max_concurrent, include_intermediate=include)
    if algorithm in RAY_ALGORITHMS:
        if algorithm_args:
            raise SpecError(f"algorithm {algorithm} takes no arguments, got {sorted(algorithm_args)}",
                            path="algorithm_args")
        return RaySpaceSearcher(search_space, grid=algorithm == "grid", metric=metric, mode=mode, seed=seed)
    raise SpecError(f"unknown algorithm {algorithm!r}; use one of {', '.join(algorithm_names())}",
                    path="algorithm")


class RaySpaceSearcher(PickledState, Searcher):
    """Ray Tune's random sampling or grid over an NNI space, one suggestion at a time."""

    def __init__(self, search_space: Mapping[str, Any], *, grid: bool, metric: str, mode: str,
                 seed: int | None = None):
        super().__init__(metric=metric, mode=mode)
        from ray.tune.search.variant_generator import generate_variants

        self._space = spaces.to_ray_grid(search_space) if grid else spaces.to_ray(search_space)
        self._rng = np.random.default_rng(seed)
        self._grid = [cfg for _, cfg in generate_variants(self._space, random_state=self._rng)] if grid else None
        self.counts = {"suggested": 0}

    def suggest(self, trial_id: str) -> dict | str | None:
        from ray.tune.search.variant_generator import generate_variants

        if self._grid is not None:
            if self.counts["suggested"] >= len(self._grid):
                return Searcher.FINISHED
            config = self._grid[self.counts["suggested"]]
        else:
            _, config = next(iter(generate_variants(self._space, random_state=self._rng)))
        self.counts["suggested"] += 1
        return dict(config)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass



class SlotSearcher(PickledState, Searcher):
    """Gives each suggested trial a free slot (an index into the gang's node list) in its config."""

    def __init__(self, searcher: Searcher, slots: int):
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher, self.slots = searcher, slots
        self._taken: dict[str, int] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.searcher.set_max_concurrency(min(max_concurrent, self.slots))
        return True  # at most one trial per slot either way

    def suggest(self, trial_id: str) -> dict | str | None:
        free = sorted(set(range(self.slots)) - set(self._taken.values()))
        if not free:
            return None
        config = self.searcher.suggest(trial_id)
        if not isinstance(config, dict):
            return config
        self._taken[trial_id] = free[0]
        return {**config, SLOT_KEY: free[0]}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._taken.pop(trial_id, None)
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def get_state(self) -> dict:
        # Tune saves the wrapped searcher on its own (save_to_dir); this wrapper keeps only its slots.
        return {"slots": self.slots, "taken": dict(self._taken)}

    def set_state(self, state: dict) -> None:
        self.slots, self._taken = state["slots"], dict(state["taken"])



def slot_resources(node_ids: list[str], bundle: Mapping[str, float]) -> Any:
    """Tune's per-trial resources: the trial's bundle on the node of the slot in its config."""
    from ray.tune import PlacementGroupFactory

    nodes, request = list(node_ids), {k: float(v) for k, v in bundle.items() if v}

    def resources(config: dict) -> PlacementGroupFactory:
        node = nodes[int(config.get(SLOT_KEY, 0))]
        return PlacementGroupFactory([request or {"CPU": 0.001}],
                                     bundle_label_selector=[{"ray.io/node-id": node}])

    return resources
