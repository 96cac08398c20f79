"""Every method a client, driver or component may call on the controller, each with its access rule.

Read from the protocol (cuberay/platform/api/protocol.py), which declares them: this table is the controller's
whole public surface. The controller wraps each of its public methods with the rule declared there
(control/endpoint.py), a unit test fails for a public method that is not in it, and docs/security.md's table of
methods and rules is generated from it.

``reads``: answered on the controller's reads thread from the last published snapshot and the store, so an
admission cycle in progress never delays it.
"""

from __future__ import annotations

import inspect

from cuberay.platform.api.protocol import ControllerAPI
from cuberay.platform.api.rules import ATTRIBUTE, Endpoint

ENDPOINTS: dict[str, Endpoint] = {name: getattr(fn, ATTRIBUTE) for name, fn in vars(ControllerAPI).items()
                                  if hasattr(fn, ATTRIBUTE)}
# Each method's parameters after ``self``: what a call must bind to (checked client-side, without Ray).
SIGNATURES: dict[str, inspect.Signature] = {
    name: inspect.signature(getattr(ControllerAPI, name)).replace(
        parameters=list(inspect.signature(getattr(ControllerAPI, name)).parameters.values())[1:],
        return_annotation=inspect.Signature.empty)
    for name in ENDPOINTS}


def rules_table() -> str:
    """The table of every method and its rule, as docs/security.md shows it (a test keeps the two equal)."""
    rows = ["| method | who may call it | what it does |", "|---|---|---|"]
    for e in ENDPOINTS.values():
        about = f" (`{e.rule.param}`)" if e.rule.param else ""
        rows.append(f"| `{e.name}` | {e.rule.describe()}{about} | {e.summary} |")
    return "\n".join(rows)
