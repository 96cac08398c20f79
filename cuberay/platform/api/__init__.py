"""The controller's API as client and controller share it: callers, access rules, the methods.

Pure: importing it loads neither Ray nor the database, so the CLI and the console speak it cheaply.
"""

from cuberay.platform.api.endpoints import ENDPOINTS, SIGNATURES
from cuberay.platform.api.protocol import ControllerAPI
from cuberay.platform.api.rules import TOKEN_ENV, USER_ENV, Caller, Endpoint, Over, Rule, Who
from cuberay.platform.spec.platform_file import TENANT_ENV  # the caller's own default tenant (Caller.tenant)

__all__ = ["ENDPOINTS", "SIGNATURES", "TENANT_ENV", "TOKEN_ENV", "USER_ENV", "Caller", "ControllerAPI", "Endpoint", "Over", "Rule",
           "Who"]
