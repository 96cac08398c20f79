"""Saving a searcher with Tune's experiment state, for the searchers cuberay defines."""

from __future__ import annotations

import pickle


class PickledState:
    """Tune checkpoints a searcher through ``save``/``restore``; here that is a pickle of ``get_state()``.

    By default the state is the searcher's attributes; a searcher that keeps less overrides ``get_state`` and
    ``set_state``.
    """

    def get_state(self) -> dict:
        return dict(self.__dict__)

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))
