"""Ray's driver prints the cluster's warnings to stdout; a cuberay command sends them to stderr, so that its stdout
(`-o json`) stays its answer."""

from __future__ import annotations

import pytest


def test_rays_cluster_warnings_go_to_stderr_once_a_command_joined(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from ray._private import worker as ray_worker

    from cuberay.platform.transport.ray_call import diagnostics_to_stderr

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)  # undone after the test
    warning = {"lines": ["There are tasks with infeasible resource requests"], "pid": "raylet", "is_err": False}
    ray_worker.print_to_stdstream(dict(warning), ignore_prefix=False)
    assert "infeasible" in capsys.readouterr().out  # Ray's own choice
    diagnostics_to_stderr()
    diagnostics_to_stderr()  # a second join wraps nothing again
    ray_worker.print_to_stdstream(dict(warning, lines=["infeasible again"]), ignore_prefix=False)
    out, err = capsys.readouterr()
    assert "infeasible again" in err and "infeasible" not in out
    assert ray_worker.print_to_stdstream.cuberay_stderr
