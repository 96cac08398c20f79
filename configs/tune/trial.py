"""An NNI trial script written the usual way: digits with a linear SGD classifier.

It asks NNI for its parameters, reports test accuracy once per epoch and at the end.
Run it under NNI (`nnictl create --config experiment.yml`) or under cuberay
(`cuberay tune import experiment.yml`) unchanged; alone it trains with its defaults.
"""

import nni
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split


def main():
    params = {"lr": 0.01, "alpha": 0.0001, "epochs": 4}
    params.update(nni.get_next_parameter() or {})
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.3, random_state=0)
    model = SGDClassifier(learning_rate="constant", eta0=params["lr"], alpha=params["alpha"], random_state=0)
    accuracy = 0.0
    for _ in range(int(params["epochs"])):
        model.partial_fit(x_train, y_train, classes=list(range(10)))
        accuracy = float(model.score(x_test, y_test))
        nni.report_intermediate_result(accuracy)
    nni.report_final_result(accuracy)


if __name__ == "__main__":
    main()
