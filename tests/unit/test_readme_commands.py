"""The README's commands as tests/integration/test_readme.py reads them, and the README's side of the bargain."""

from __future__ import annotations

import re

from tests.readme_commands import commands, readme_commands, split_comment

TEXT = """\
Intro `not a command`.

```bash
cuberay up          # starts it
cuberay sim t.csv --nodes 4 \\
    --policy fifo   # joined
echo "a # in quotes" # the comment
# a comment line is no command
cuberay kube apply m/   # needs Kubernetes: a cluster
cuberay cancel nosuch   # exits 4: there is none
```

```yaml
kind: Task   # not bash
```

   ```bash
   cuberay queue
   ```
"""


def test_commands_are_lines_of_bash_blocks_with_continuations_joined() -> None:
    found = commands(TEXT)
    assert [c.text for c in found] == ["cuberay up", "cuberay sim t.csv --nodes 4 --policy fifo",
                                       'echo "a # in quotes"', "cuberay kube apply m/", "cuberay cancel nosuch",
                                       "cuberay queue"]
    assert [c.line for c in found] == [4, 5, 7, 9, 10, 18]


def test_marks_say_what_is_left_out_and_what_exit_is_expected() -> None:
    found = {c.text: c for c in commands(TEXT)}
    assert not found["cuberay kube apply m/"].runs_here and found["cuberay kube apply m/"].needs == "Kubernetes"
    assert found["cuberay cancel nosuch"].exits == 4 and found["cuberay cancel nosuch"].runs_here
    assert found["cuberay up"].exits == 0 and found["cuberay up"].runs_here


def test_a_hash_inside_quotes_is_text() -> None:
    assert split_comment("curl -d '{\"a\": \"#1\"}'  # post") == ("curl -d '{\"a\": \"#1\"}'", "post")
    assert split_comment("echo a#b") == ("echo a#b", "")


def test_the_readme_commands_can_run_as_written() -> None:
    """No placeholder a reader must fill in, no optional [--flag], few commands left out, make only demo/test."""
    found = readme_commands()
    runs = [c for c in found if c.runs_here]
    assert len(runs) >= 40, len(runs)
    placeholders = [f"README:{c.line} {c.text}" for c in runs if re.search(r"<[^>]*>|\s\[-", c.text)]
    assert not placeholders, f"commands a reader cannot run as written: {placeholders}"
    marked = [c for c in found if c.needs]
    assert 0 < len(marked) <= 6, [c.text for c in marked]  # "at most a handful", each visible in the README
    assert {c.text for c in found if c.text.startswith("make ")} == {"make demo", "make test"}
    assert any(c.text.startswith("cuberay down") for c in runs[-3:]), "the README ends by stopping the platform"


def test_every_output_check_of_the_walk_through_names_a_readme_command_as_written() -> None:
    """The walk-through checks some commands' output (it is the suite's only run of them): a README edit that
    rewords one must move its check along, or that run would go unchecked."""
    from tests.integration.test_readme import CHECKS

    runs = {c.text for c in readme_commands() if c.runs_here}
    assert CHECKS and set(CHECKS) <= runs, sorted(set(CHECKS) - runs)
