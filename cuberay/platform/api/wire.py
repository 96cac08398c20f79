"""The controller's API as JSON: how a call, its answer and its error travel over HTTP.

Pure (pydantic only): the HTTP transport (cuberay/platform/transport/http.py) and the API server
(cuberay/console/app.py) both speak it. A call is ``POST /api/v1/call/<method>`` with the body
``{"caller": {...}, "args": [...], "kwargs": {...}}``; the answer is ``{"result": ...}``, the method's return
value as its annotation in cuberay/platform/api/protocol.py dumps it to JSON (the same records ``-o json``
prints), and a refusal is ``{"error": {"type", "message", "exit_code"}}`` with an HTTP status that says which.
Each side reads the answer back through the same annotation, so a record arrives as the record it was.
"""

from __future__ import annotations

import functools
import typing
from typing import Any, Mapping

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from cuberay import errors
from cuberay.errors import CuberayError
from cuberay.platform.api.endpoints import SIGNATURES
from cuberay.platform.api.protocol import ControllerAPI
from cuberay.platform.api.rules import Caller

PREFIX = "/api/v1"
CALL_PATH = PREFIX + "/call/"
# An error's HTTP status, by the CLI's exit code: 2 spec/usage, 3 refused, 4 not found; 1 is the platform's.
_STATUS = {2: 400, 3: 403, 4: 404}
_UNAVAILABLE = (errors.PlatformNotRunningError,)
_BY_EXIT: dict[int, type[CuberayError]] = {2: errors.SpecError, 3: errors.AdmissionError, 4: errors.NotFoundError}  # the controller is down or restarting: 503, worth a retry


class WireError(CuberayError):
    """A request or answer on the wire is not what the API says it is."""

    exit_code = 2


@functools.cache
def _answer_type(method: str) -> TypeAdapter[Any]:
    hints = typing.get_type_hints(getattr(ControllerAPI, method))
    return TypeAdapter(hints.get("return", Any))


def method_known(method: str) -> bool:
    return method in SIGNATURES


def answer_schema(method: str) -> dict[str, Any]:
    """The JSON Schema of ``method``'s answer (its ``result``), as the OpenAPI document shows it."""
    return _answer_type(method).json_schema(mode="serialization")


def encode_call(caller: Caller, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's body; records among the arguments (a driver's trials) go as their JSON form."""
    return {"caller": caller.model_dump(mode="json"), "args": to_jsonable_python(list(args)),
            "kwargs": to_jsonable_python(dict(kwargs))}


def decode_call(method: str, body: Any) -> tuple[Caller, tuple[Any, ...], dict[str, Any]]:
    """The caller and arguments of a call's body; WireError when they do not fit the method's signature."""
    if not method_known(method):
        raise errors.NotFoundError(f"the API has no method {method!r}; its methods are listed in "
                                   f"{PREFIX}/openapi.json")
    if not isinstance(body, dict) or set(body) - {"caller", "args", "kwargs"}:
        raise WireError(f"a call's body is a JSON object with caller, args and kwargs; got "
                        f"{type(body).__name__} {sorted(body) if isinstance(body, dict) else ''}".rstrip())
    args, kwargs = body.get("args", []), body.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise WireError("a call's args is a JSON array and its kwargs a JSON object")
    try:
        caller = Caller.model_validate(body.get("caller"))
    except ValidationError as err:
        raise WireError(f"the call's caller is not valid ({_problems(err)}); send "
                        f'{{"user": NAME}} at least') from None
    try:
        SIGNATURES[method].bind(*args, **kwargs)
    except TypeError as err:
        raise WireError(f"{method}() does not take these arguments ({err}); its signature is "
                        f"{method}{SIGNATURES[method]}") from None
    return caller, tuple(args), kwargs


def encode_answer(method: str, value: Any) -> dict[str, Any]:
    dumped = _answer_type(method).dump_python(value, mode="json")
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        # A field kept out of stored and printed records (``exclude``) still belongs to the answer, e.g. a
        # submit's ``repeat``: it goes on the wire whenever it is not its default.
        for name, field in type(value).model_fields.items():
            if field.exclude and getattr(value, name) != field.default:
                dumped[name] = getattr(value, name)
    return {"result": dumped}


def decode_answer(method: str, body: Any) -> Any:
    if not isinstance(body, dict) or "result" not in body:
        raise WireError(f"the API's answer to {method}() has no result: {str(body)[:200]}")
    try:
        return _answer_type(method).validate_python(body["result"])
    except ValidationError as err:
        raise WireError(f"the API's answer to {method}() is not what the API says it returns ({_problems(err)}); "
                        f"is this cuberay the server's version?") from None


def encode_error(err: CuberayError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and body of a refusal."""
    status = 503 if isinstance(err, _UNAVAILABLE) else _STATUS.get(err.exit_code, 500)
    return status, {"error": {"type": type(err).__name__, "message": str(err), "exit_code": err.exit_code}}


def decode_error(status: int, body: Any) -> CuberayError:
    """The CuberayError an error answer stands for: the same class the controller raised, with its message."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        return errors.PlatformNotRunningError(f"the cuberay API answered HTTP {status} without an error record: "
                                              f"{str(body)[:200]}")
    cls = getattr(errors, str(detail.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, CuberayError)):  # a module's own subclass: its exit code's
        cls = _BY_EXIT.get(detail.get("exit_code"), CuberayError)  # type: ignore[arg-type]
    err = cls.__new__(cls)
    Exception.__init__(err, str(detail.get("message", "")))  # the message as raised: no prefix added twice
    if isinstance(err, errors.SpecError):
        err.file = err.path = None
        err.reason = str(err)
    return err


def _problems(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'caller'}: {e['msg']}" for e in err.errors())
