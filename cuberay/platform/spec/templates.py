"""Templates in pipeline specs: ``{{ params.epochs }}``, ``{{ steps.train.outputs.accuracy }}``, ``{{ run_id }}``.

Jinja2, sandboxed, with undefined names as errors (CubeStudio renders its
workflows with Jinja too). Besides rendering, this module reads which dotted
names a template uses (:func:`references`), so a pipeline is checked before
anything runs: an unknown variable, a parameter nobody defined or a step that is
not upstream is a spec error naming the step and the field.

Variables: ``run_id``, ``execution_date`` (ISO time of the cron tick, or of the
request for a manual run), ``creator``, ``pipeline``, ``params.NAME`` and
``steps.STEP.outputs.NAME`` / ``steps.STEP.dir`` / ``steps.STEP.state``.

A step's ``command`` is rendered by :mod:`cuberay.platform.spec.shell_template`,
which passes each value to the shell as an environment variable; ``| shell_raw``
is the one way to write a value into the command's text.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

SCALARS = ("run_id", "execution_date", "creator", "pipeline")
ROOTS = (*SCALARS, "params", "steps")
STEP_FIELDS = ("outputs", "dir", "state")
RAW_FILTER = "shell_raw"


class Raw(str):
    """A value the author asked to write into a shell command as it is: ``{{ x | shell_raw }}``."""


def environment(finalize: Callable[[Any], Any] | None = None) -> SandboxedEnvironment:
    """The template environment; ``finalize`` sees the value of every ``{{ }}`` before it becomes text."""
    env = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False,
                               finalize=finalize)
    env.filters[RAW_FILTER] = lambda value: Raw(value)  # plain text outside a command
    return env


_ENV = environment()

Ref = tuple[str, ...]


class TemplateError(ValueError):
    """A template that does not parse, or reads a name that is not defined."""


def is_template(text: str) -> bool:
    return "{{" in text or "{%" in text


def strings(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string inside ``value`` (dicts and lists walked) with its path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from strings(item, (*path, str(key)))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from strings(item, (*path, i))


def references(text: str, *, expression: bool = False) -> set[Ref]:
    """The dotted names ``text`` reads, e.g. ``{("steps", "train", "outputs", "acc"), ("run_id",)}``.

    With ``expression`` the text is one Jinja expression (a ``when`` condition), not a template.
    Names the template binds itself (``{% set %}``, ``{% for %}``) are left out.
    """
    source = "{{ " + text + " }}" if expression else text
    try:
        tree = _ENV.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"{'expression' if expression else 'template'} {text!r} does not parse: "
                            f"{exc.message}; check the braces and the operators") from None
    bound = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    found: set[Ref] = set()
    _collect(tree, found)
    return {ref for ref in found if ref[0] not in bound}


def _collect(node: nodes.Node, found: set[Ref]) -> None:
    if isinstance(node, (nodes.Getattr, nodes.Getitem, nodes.Name)):
        parts: list[str] = []
        cursor: nodes.Node = node
        while isinstance(cursor, (nodes.Getattr, nodes.Getitem)):
            if isinstance(cursor, nodes.Getattr):
                parts.append(cursor.attr)
            elif isinstance(cursor.arg, nodes.Const) and isinstance(cursor.arg.value, str):
                parts.append(cursor.arg.value)
            else:  # a computed index: what is below it is unknown; its index is read on its own
                _collect(cursor.arg, found)
                parts = []
            cursor = cursor.node
        if isinstance(cursor, nodes.Name):
            if cursor.ctx == "load":
                found.add((cursor.name, *reversed(parts)))
            return
        _collect(cursor, found)
        return
    for child in node.iter_child_nodes():
        _collect(child, found)


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """``value`` with every template string rendered (dicts and lists walked; other values kept)."""
    if isinstance(value, str):
        return render_text(value, context) if is_template(value) else value
    if isinstance(value, Mapping):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    return value


def render_text(text: str, context: Mapping[str, Any], env: SandboxedEnvironment = _ENV) -> str:
    try:
        return env.from_string(text).render(**context)
    except TemplateError:
        raise
    except UndefinedError as exc:
        raise TemplateError(f"template {text!r}: {exc.message}; a step's outputs exist once it succeeded and "
                            f"set them with cuberay.outputs.set(NAME, VALUE)") from None
    except (TemplateSyntaxError, SecurityError, TypeError, ValueError, ArithmeticError) as exc:
        raise TemplateError(f"template {text!r} failed: {exc}") from None


def condition(expr: str | bool, context: Mapping[str, Any]) -> bool:
    """A ``when`` condition: a boolean, or a Jinja expression such as ``steps.eval.outputs.accuracy > 0.9``."""
    if isinstance(expr, bool):
        return expr
    try:
        return bool(_ENV.compile_expression(expr, undefined_to_none=False)(**context))
    except UndefinedError as exc:
        raise TemplateError(f"condition {expr!r}: {exc.message}; a step's outputs exist once it succeeded and "
                            f"set them with cuberay.outputs.set(NAME, VALUE)") from None
    except (TemplateSyntaxError, SecurityError, TypeError, ValueError, ArithmeticError) as exc:
        raise TemplateError(f"condition {expr!r} failed: {exc}") from None


class AnyOutputs(dict):  # type: ignore[type-arg]
    """Outputs of a step not run yet, for checking a spec: every name reads as ``"0"``."""

    def __missing__(self, key: str) -> str:
        return "0"


def step_context(outputs: Mapping[str, Any] | None, directory: str, state: str) -> dict[str, Any]:
    """What ``steps.NAME`` holds in a template."""
    return {"outputs": dict(outputs or {}), "dir": directory, "state": state}
