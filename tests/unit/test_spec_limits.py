"""Hostile or absurd spec files are refused fast: size, alias expansion, nesting, resource amounts, accelerators.

Each limit is measured through ``cuberay spec validate`` (exit 2, no traceback) and timed: a refusal
must take well under a second of CPU, whatever the file would have expanded to.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.platform.spec import load_spec
from cuberay.platform.spec.documents import MAX_SPEC_BYTES, read_documents
from cuberay.platform.spec.resources import parse_worker

HEAD = "apiVersion: cuberay.io/v1alpha1\nkind: TrainJob\nmetadata: {name: bomb}\nspec:\n  entrypoint: pkg.mod:train\n"


@pytest.fixture(scope="module", autouse=True)
def _warm_cli(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The CLI imports its command modules on first use; time the refusals, not the imports."""
    folder = tmp_path_factory.mktemp("warm")
    (folder / "good.yaml").write_text(HEAD + "  workers: 2\n")
    (folder / "bad.yaml").write_text(HEAD + "  workers: [1]\n")
    assert main(["spec", "validate", "--no-import-check", str(folder / "good.yaml")]) == 0
    assert main(["spec", "validate", "--no-import-check", str(folder / "bad.yaml")]) == 2


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    # CPU time of this process: what a hostile file costs us, not how busy the machine's other tenants are.
    # The garbage of earlier tests is collected first and the collector paused while timing: a full collection
    # of a big heap can cost a second of its own (seen in CI: 1.3 s for a refusal that takes 0.02 s).
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        code = main(["spec", "validate", "--no-import-check", str(path)])
        elapsed = time.process_time() - t0
    finally:
        gc.enable()
    return code, capsys.readouterr().err, elapsed


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs: each level lists the one below ``width`` times, ``width ** levels`` leaves in all."""
    lines = [f"    - &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"    - &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return HEAD + "  workers:\n" + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_in_well_under_a_second(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())  # 9 ** 9 = 387 million leaves once expanded; a few hundred bytes on disk
    code, err, elapsed = _validate(path, capsys)
    assert code == 2, err
    assert elapsed < 1.0, f"took {elapsed:.1f} s"
    assert "aliases" in err and "100,000" in err and "Traceback" not in err
    assert len(err) < 600, "the error must not print the expanded value"


def test_a_small_alias_is_fine() -> None:
    text = HEAD + "  env: &e {A: '1'}\n  workers: 2\n"
    assert load_spec(text).spec.workers == 2
    merged = read_documents("base: &b {x: 1, y: 2}\nchild: {<<: *b, y: 3}\n")[0].data
    assert merged["child"] == {"x": 1, "y": 3}


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(SpecError, match="refers to the node that contains it"):
        read_documents("a: &a [1, *a]\n")


def test_a_large_file_is_refused_before_it_is_read(tmp_path: Path, capsys) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as fh:
        fh.write(HEAD)
        fh.truncate(50 * 2**20)  # 50 MiB (sparse: the tail reads as NUL bytes, if anything read it)
    code, err, elapsed = _validate(path, capsys)
    assert code == 2, err
    assert elapsed < 1.0, f"took {elapsed:.1f} s"
    assert "50.0 MiB" in err and "at most 1 MiB" in err and "Traceback" not in err


def test_a_large_text_is_refused_too() -> None:
    with pytest.raises(SpecError, match="at most 1 MiB"):
        read_documents(HEAD + "# x\n" * (MAX_SPEC_BYTES // 4 + 1))


def test_deep_nesting_is_refused_in_well_under_a_second(tmp_path: Path, capsys) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(HEAD + "  workers: " + "[" * 5000 + "]" * 5000 + "\n")
    code, err, elapsed = _validate(path, capsys)
    assert code == 2, err
    assert elapsed < 1.0, f"took {elapsed:.1f} s"
    assert "nested deeper than 64" in err and "Traceback" not in err


def test_nesting_within_the_limit_is_read() -> None:
    data = read_documents("a: " + "[" * 60 + "]" * 60 + "\n")[0].data
    for _ in range(60):
        data = data["a"] if isinstance(data, dict) else data[0] if data else data
    assert data == []


def test_a_long_value_in_an_error_is_shortened(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(HEAD + "  workers: [" + ", ".join(["12345"] * 2000) + "]\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.path == "spec.workers"
    assert "..." in str(err.value) and len(str(err.value)) < 600


# ---------------------------------------------------------------- resource amounts

@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"memory": "99999999999999999999999999Ei"}, ["memory", "at most 1Ei"]),
        ({"memory": "1e400"}, ["memory", "at most 1Ei"]),
        ({"memory": "1e999999999Ei"}, ["memory", "too large"]),
        ({"gpu": "1e400"}, ["gpu", "too large", "at most 100,000 cards"]),
        ({"gpu": 1e400}, ["gpu", "at most 100,000 cards"]),
        ({"gpu": "1000000"}, ["gpu", "at most 100,000 cards"]),
        ({"cpu": "1e400"}, ["cpu", "at most 1,000,000 cores"]),
        ({"cpu": "1e9"}, ["cpu", "at most 1,000,000 cores"]),
        ({"rdma": "1e400"}, ["rdma", "at most 100,000 devices"]),
        ({"custom": {"foo": float("inf")}}, ["custom resource foo", "at most"]),
        ({"custom": {"foo": 1e30}}, ["custom resource foo", "at most 1,000,000,000,000,000"]),
        ({"gpu": "nan"}, ["gpu", "not a number"]),
    ],
)
def test_absurd_amounts_are_refused_with_the_bound(fields: dict, words: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse_worker(**fields)
    text = str(err.value)
    assert "must be >= 0" not in text
    for word in words:
        assert word in text, text


def test_amounts_at_the_bounds_are_accepted() -> None:
    worker = parse_worker(cpu="1000000", memory="1Ei", gpu="100000", rdma="100000", custom={"foo": 1e15})
    assert worker.resources["memory"] == 2**60 and worker.resources["GPU"] == 100_000


def test_a_spec_with_an_infinite_gpu_names_the_bound(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(HEAD + "  resources: {gpu: '1e400'}\n")
    assert err.value.path == "spec.resources.gpu" and "at most 100,000 cards" in str(err.value)


# ---------------------------------------------------------------- one accelerator kind per worker

@pytest.mark.parametrize(
    "fields",
    [
        {"gpu": "1", "custom": {"TPU": 1}},
        {"gpu": "1(V100)", "custom": {"NPU": 1}},
        {"custom": {"NPU": 1, "HPU": 2}},
    ],
)
def test_two_accelerator_kinds_in_one_worker_are_refused(fields: dict) -> None:
    with pytest.raises(SpecError) as err:
        parse_worker(**fields)
    text = str(err.value)
    assert "one accelerator kind per worker" in text and "separate jobs" in text


def test_one_accelerator_kind_through_custom_is_fine() -> None:
    assert parse_worker(custom={"TPU": 4}).card_resource == "TPU"
    assert parse_worker(gpu="1(tpu)").card_resource == "TPU"


def test_spec_validate_refuses_two_accelerator_kinds(tmp_path: Path, capsys) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(HEAD + "  resources: {gpu: '1(V100)', custom: {NPU: 1}}\n")
    code, err, _ = _validate(path, capsys)
    assert code == 2 and "one accelerator kind per worker" in err and f"{path}: spec.resources" in err, err
