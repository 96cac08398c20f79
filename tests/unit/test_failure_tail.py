"""A failed job's message is its driver's own last lines, not what Ray forwarded from the peers it stopped."""

from cuberay.platform.control.failure import failure_tail

# The end of a real failed command gang's driver log (CI, 2026-12-02): worker 0 exited 7, the gang stopped
# worker 1, whose SIGTERM traceback Ray forwarded after the driver's own lines.
GANG_LOG = """a-fail-1 attempt 2: 2 worker(s) on node(s) e647772f
[worker 0] boom: disk full
gang: worker 0 exited with code 7; stopping the gang
\x1b[36m(GangWorker pid=25452)\x1b[0m Exception ignored in: <function Popen.__del__ at 0x7fc64f748ea0>
\x1b[36m(GangWorker pid=25452)\x1b[0m Traceback (most recent call last):
\x1b[36m(GangWorker pid=25452)\x1b[0m   File "python/ray/_raylet.pyx", line 712, in ray._raylet.raise_sys_exit_with_custom_error_message
\x1b[36m(GangWorker pid=25452)\x1b[0m SystemExit: 1
"""


def test_the_drivers_own_lines_win_over_forwarded_peer_noise() -> None:
    message = failure_tail(GANG_LOG)
    assert "boom: disk full" in message and "exited with code 7" in message, message
    assert "SystemExit" not in message and "\x1b[" not in message


def test_a_workers_forwarded_error_is_kept_when_it_is_the_reason() -> None:
    """The driver died without a word after its first line (SIGKILL, OOM): the workers' lines are the reason."""
    log = ("a-x-1 attempt 1: 2 worker(s) on node(s) ab12cd34\n"
           "\x1b[36m(RayTrainWorker pid=24788, ip=10.0.0.2)\x1b[0m Traceback (most recent call last):\n"
           "\x1b[36m(RayTrainWorker pid=24788, ip=10.0.0.2)\x1b[0m ValueError: bad shape\n")
    assert failure_tail(log).endswith("(RayTrainWorker pid=24788, ip=10.0.0.2) ValueError: bad shape")


def test_prefixes_ray_writes_for_other_processes_are_recognised() -> None:
    for prefix in ("(MapBatches(fn) pid=7)", "(pid=9)", "(GangWorker pid=3, ip=10.1.2.3)"):
        noise = f"{prefix} File \"python/ray/_raylet.pyx\", in raise_sys_exit_with_custom_error_message\n"
        assert failure_tail("the reason\n" + noise) == "the reason", prefix
    assert failure_tail("\x1b[?25lcursor hidden\x1b[?25h\n") == "cursor hidden"


def test_the_last_three_lines_at_most_600_characters_and_an_empty_log() -> None:
    assert failure_tail("a\n\nb\nc\nd\n") == "b | c | d"
    assert len(failure_tail("x" * 2000)) == 600
    assert failure_tail("") == "no output" and failure_tail("\n \n") == "no output"
