"""Hyperparameter search on Ray Tune with NNI's search spaces, tuners and trial code (the TuneJob kind).

space (NNI <-> Ray Tune spaces), nni_searcher / searchers (NNI's tuners and Ray's random/grid as Tune
Searchers; trial slots pinned to the gang's nodes), nni_bridge (NNI's trial API answered by Tune),
schedulers, search (one Tune run), job (a TuneJob's driver), results, nni_import (NNI experiment files).
"""
