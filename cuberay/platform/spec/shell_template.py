"""Template values reach a step's shell ``command`` as environment variables, never as command text.

A step's ``command`` runs through a shell (bash; ``sh`` for tune trials), so a value written into its text
(a parameter ``x; rm -rf ~``, a step output, ``creator``) would be shell code. Instead each ``{{ expression }}``
in ``command`` renders to a placeholder; a walk over the rendered text then tracks where the shell would be
when it reads that spot (unquoted, ``'...'``, ``"..."``, ``$'...'``, ``$( )``, backticks, a here-document, a
comment) and writes a reference to a variable the job carries in its env, quoted for that spot::

    echo {{ params.v }}          ->  echo "${CUBERAY_TPL_0}"
    echo "day {{ params.v }}"    ->  echo "day ${CUBERAY_TPL_0}"
    echo 'day {{ params.v }}'    ->  echo 'day '"${CUBERAY_TPL_0}"''

A shell expands a variable once and never parses the result as code (bash arithmetic aside: below), so no
value can end a quote, start a command, add a redirection or split into words. Where the walk could misread
the author's shell (a ``case`` pattern's ``)`` inside ``$( )``), a reference is quoted for the wrong spot: the
value may be split or globbed, but it is still never parsed. What the author wrote around the expressions, and
``{% if %}`` / ``{% for %}``, stay as written. ``{{ x | shell_raw }}`` writes x into the text as it is: the
author's explicit choice that it is shell code. Spots where the shell would evaluate the value itself are
refused: inside ``$(( ))`` / ``(( ))``, right after ``\\`` or ``$``, in a here-document with a quoted
delimiter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import cuberay.platform.spec.templates as tpl

PREFIX = "CUBERAY_TPL_"
FIELD = "command"  # the spec field a shell runs (Task, TrainJob command mode, TuneJob command trials)
_MARK = "\x00"  # no command can hold a NUL (argv and env are C strings), so none is the author's
_BREAKS = frozenset(" \t\n;&|()<>")


def render_job(job: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """A step's job with every template rendered: ``spec.command`` by :func:`render_command`, its values
    added to ``spec.env``; every other field as plain text."""
    spec = job.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get(FIELD), str):
        return tpl.render(dict(job), context)
    command, values = render_command(spec[FIELD], context)
    rest = tpl.render({**job, "spec": {k: v for k, v in spec.items() if k != FIELD}}, context)
    rest["spec"] = {k: command if k == FIELD else rest["spec"][k] for k in spec}
    if values:
        own = rest["spec"].get("env")
        own = dict(own) if isinstance(own, Mapping) else {}
        reserved = sorted(k for k in own if str(k).startswith(PREFIX))
        if reserved:
            raise tpl.TemplateError(f"env {', '.join(reserved)}: names starting {PREFIX} carry the template "
                                    f"values of command; rename them")
        rest["spec"]["env"] = {**own, **values}
    return rest


def render_command(text: str, context: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """``text`` rendered for a shell: (the command, the env it needs), values named ``CUBERAY_TPL_<n>``.

    Raises:
        TemplateError: the template fails, or puts a value where the shell would evaluate it.
    """
    if _MARK in text:
        raise tpl.TemplateError("command holds a NUL character, which no command can hold; remove it")
    if not tpl.is_template(text):
        return text, {}
    return _Walk(tpl.render_text(text, context, _ENV)).run()


def _placeholder(value: Any) -> str:
    text = str(value)
    if _MARK in text:
        raise tpl.TemplateError("a value put into command holds a NUL character, which no command or "
                                "environment variable can hold (the output of a macro, call or {% set %} "
                                "block is one: write its expressions into command itself)")
    if isinstance(value, tpl.Raw):
        return text
    try:
        encoded = text.encode()
    except UnicodeEncodeError:
        raise tpl.TemplateError(f"a value put into command is not valid text: {text[:40]!r}") from None
    return _MARK + encoded.hex() + _MARK


_ENV = tpl.environment(finalize=_placeholder)


@dataclass
class _Frame:
    """Where the shell is: ``code`` (closer "" for the command itself, ")" for $( ), "`" for backticks),
    ``sq`` '...', ``dsq`` $'...', ``dq`` "...", ``arith`` $(( )) or (( )), ``comment``, ``heredoc`` a body."""

    kind: str
    closer: str = ""
    depth: int = 0  # unclosed "(" inside a $( ) or an arithmetic
    delimiter: str = ""  # heredoc: the line that ends it
    strip_tabs: bool = False  # heredoc: <<- (leading tabs ignored)
    expands: bool = True  # heredoc: False when the delimiter is quoted (the body is literal)
    line_start: bool = True  # heredoc: at the start of a line


def _reference(frame: _Frame, name: str) -> str:
    """``$name``, quoted so the shell reads the value as literal text at this spot."""
    if frame.kind == "arith":
        raise tpl.TemplateError("a template value in command cannot go inside $(( )) or (( )): bash evaluates "
                                "that text as an expression, which can run commands; compute with the value "
                                "in your program (pass it as an argument)")
    if frame.kind == "heredoc" and not frame.expands:
        raise tpl.TemplateError("a template value in command cannot go in a here-document whose delimiter is "
                                "quoted (<<'EOF'): it expands nothing; unquote the delimiter (<<EOF)")
    ref = f"${{{name}}}"
    if frame.kind in ("dq", "heredoc"):
        return ref
    if frame.kind == "sq":
        return f"'\"{ref}\"'"  # close the quotes, the value, reopen them
    if frame.kind == "dsq":
        return f"'\"{ref}\"$'"
    return f'"{ref}"'


class _Walk:
    """One pass over a rendered command, tracking the shell's quoting as it would read it."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0
        self.out: list[str] = []
        self.env: dict[str, str] = {}
        self.stack = [_Frame("code")]
        self.heredocs: list[_Frame] = []  # bodies that start after the next newline of the code
        self.word_start = True

    def run(self) -> tuple[str, dict[str, str]]:
        while self.i < len(self.text):
            frame = self.stack[-1]
            if frame.kind == "heredoc" and frame.line_start and self._heredoc_ends(frame):
                continue
            if frame.kind == "heredoc":
                frame.line_start = False
            if self.text[self.i] == _MARK:
                self._value(frame)
            else:
                getattr(self, "_in_" + frame.kind)(frame, self.text[self.i])
        return "".join(self.out), self.env

    # ------------------------------------------------------------ helpers

    def _copy(self, count: int = 1) -> None:
        self.out.append(self.text[self.i:self.i + count])
        self.i += count

    def _ahead(self, offset: int = 1) -> str:
        return self.text[self.i + offset:self.i + offset + 1]

    def _value(self, frame: _Frame) -> None:
        end = self.text.find(_MARK, self.i + 1)
        try:
            value = bytes.fromhex(self.text[self.i + 1:end] if end > 0 else "?").decode()
        except ValueError:
            raise tpl.TemplateError("a {% filter %} block in command changed the values inside it; put the "
                                    "filter inside each {{ }} instead") from None
        name = f"{PREFIX}{len(self.env)}"
        self.out.append(_reference(frame, name))
        self.env[name] = value
        self.i = end + 1
        self.word_start = False

    def _escape(self) -> None:
        if self._ahead() == _MARK:
            raise tpl.TemplateError("a backslash right before {{ }} in command would escape the value's first "
                                    "character; remove it (the value is quoted already)")
        self._copy(2)

    def _dollar(self) -> bool:
        """``$(``, ``$((`` and ``$`` before a value; False when the ``$`` is plain text."""
        nxt = self._ahead()
        if nxt == _MARK:
            raise tpl.TemplateError("a $ right before {{ }} in command would read a variable named by the "
                                    "value; write the variable's name, or put the $ in the value")
        if nxt != "(":
            return False
        if self._ahead(2) == "(":
            self.stack.append(_Frame("arith"))
            self._copy(3)
        else:
            self.stack.append(_Frame("code", closer=")"))
            self._copy(2)
        self.word_start = True
        return True

    # ------------------------------------------------------------ one handler per frame kind

    def _in_code(self, frame: _Frame, c: str) -> None:
        start, self.word_start = self.word_start, c in _BREAKS
        if c == "\\":
            self._escape()
        elif c == "'":
            self.stack.append(_Frame("sq"))
            self._copy()
        elif c == '"':
            self.stack.append(_Frame("dq"))
            self._copy()
        elif c == "$" and self._ahead() in ("'", '"'):
            self.stack.append(_Frame("dsq" if self._ahead() == "'" else "dq"))
            self._copy(2)
        elif c == "$" and self._dollar():
            pass
        elif c == "`":
            if frame.closer == "`":
                self.stack.pop()
            else:
                self.stack.append(_Frame("code", closer="`"))
            self._copy()
        elif c == "#" and start:
            self.stack.append(_Frame("comment"))
            self._copy()
        elif c == "(" and start and self._ahead() == "(":
            self.stack.append(_Frame("arith"))
            self._copy(2)
        elif c in "()" and frame.closer == ")":
            frame.depth += 1 if c == "(" else -1
            if frame.depth < 0:
                self.stack.pop()
                self.word_start = False
            self._copy()
        elif c == "<" and self._ahead() == "<" and self._ahead(2) != "<":
            self._heredoc_operator()
        elif c == "\n" and self.heredocs:
            self._copy()
            self.stack.append(self.heredocs.pop(0))
        else:
            self._copy()

    def _in_sq(self, frame: _Frame, c: str) -> None:
        if c == "'":
            self.stack.pop()
        self._copy()

    def _in_dsq(self, frame: _Frame, c: str) -> None:
        if c == "\\":
            self._escape()
            return
        if c == "'":
            self.stack.pop()
        self._copy()

    def _in_dq(self, frame: _Frame, c: str) -> None:
        if c == "\\":
            self._escape()
        elif c == "$" and self._dollar():
            pass
        elif c == "`":
            self.stack.append(_Frame("code", closer="`"))
            self._copy()
        else:
            if c == '"':
                self.stack.pop()
            self._copy()

    def _in_arith(self, frame: _Frame, c: str) -> None:
        if c in "'\"`" or c == "$" and self._ahead() == "(":
            self._in_code(frame, c)  # quotes and substitutions nest inside
        elif c == ")" and frame.depth == 0:
            self.stack.pop()
            self._copy(2 if self._ahead() == ")" else 1)
            self.word_start = False
        else:
            frame.depth += {"(": 1, ")": -1}.get(c, 0)
            self._copy()

    def _in_comment(self, frame: _Frame, c: str) -> None:
        if c == "\n":
            self.stack.pop()  # the newline is the code's: it may start a here-document
            self.word_start = True
            return
        self._copy()

    def _in_heredoc(self, frame: _Frame, c: str) -> None:
        if frame.expands:
            if c == "\\":
                self._escape()
                return
            if c == "$" and self._dollar():
                return
            if c == "`":
                self.stack.append(_Frame("code", closer="`"))
                self._copy()
                return
        frame.line_start = c == "\n"
        self._copy()

    # ------------------------------------------------------------ here-documents

    def _heredoc_operator(self) -> None:
        """``<<WORD`` / ``<<-WORD``: the body is read after the next newline; a quoted WORD expands nothing."""
        strip = self._ahead(2) == "-"
        self._copy(3 if strip else 2)
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self._copy()
        word, quoted = [], False
        while self.i < len(self.text) and self.text[self.i] not in _BREAKS:
            c = self.text[self.i]
            if c == _MARK:
                raise tpl.TemplateError("a here-document's delimiter in command cannot be a template value; "
                                        "write it out")
            if c in "'\"":
                end = self.text.find(c, self.i + 1)
                end = len(self.text) if end < 0 else end
                word.append(self.text[self.i + 1:end])
                self._copy(end + 1 - self.i)
                quoted = True
            elif c == "\\":
                word.append(self._ahead())
                self._copy(2)
                quoted = True
            else:
                word.append(c)
                self._copy()
        self.heredocs.append(_Frame("heredoc", delimiter="".join(word), strip_tabs=strip, expands=not quoted))
        self.word_start = False

    def _heredoc_ends(self, frame: _Frame) -> bool:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        line = self.text[self.i:end]
        if (line.lstrip("\t") if frame.strip_tabs else line) != frame.delimiter:
            return False
        self._copy(end + 1 - self.i)
        self.stack.pop()
        if self.heredocs:
            self.stack.append(self.heredocs.pop(0))
        return True
