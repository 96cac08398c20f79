"""Two pipeline steps on scikit-learn's bundled digits (offline, about a second each): train, then evaluate.

    python -m cuberay.examples.digits_steps train            # fits, writes model.pkl, sets train_accuracy, model
    python -m cuberay.examples.digits_steps evaluate MODEL   # scores the held-out split, sets accuracy

``configs/pipelines/digits-flow.yaml`` chains them: the evaluate step reads the
train step's model file through ``{{ steps.train.outputs.model }}``.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import cuberay.outputs as outputs


def _split() -> Any:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    return train_test_split(x / 16.0, y, test_size=0.25, random_state=0)


def train() -> float:
    from sklearn.linear_model import LogisticRegression

    x_train, _, y_train, _ = _split()
    model = LogisticRegression(max_iter=300).fit(x_train, y_train)
    path = outputs.dir() / "model.pkl"
    path.write_bytes(pickle.dumps(model))
    accuracy = round(float(model.score(x_train, y_train)), 4)
    outputs.set("train_accuracy", accuracy)
    outputs.set("model", str(path))
    print(f"train accuracy {accuracy}; model in {path}")
    return accuracy


def evaluate(model_path: str) -> float:
    _, x_test, _, y_test = _split()
    model = pickle.loads(Path(model_path).read_bytes())  # our own file, written by the train step
    accuracy = round(float(model.score(x_test, y_test)), 4)
    outputs.set("accuracy", accuracy)
    print(f"test accuracy {accuracy}")
    return accuracy


def main(argv: list[str]) -> int:
    if argv[:1] == ["train"] and len(argv) == 1:
        train()
    elif argv[:1] == ["evaluate"] and len(argv) == 2:
        evaluate(argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
