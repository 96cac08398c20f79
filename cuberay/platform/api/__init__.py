"""The controller's API as client and controller share it: callers, access rules, the methods.

Pure: importing it loads neither Ray nor the database, so the CLI and the console speak it cheaply.
"""

from cuberay.platform.api.endpoints import ENDPOINTS, Endpoint
from cuberay.platform.api.rules import TOKEN_ENV, USER_ENV, Caller, Over, Rule, Who

__all__ = ["ENDPOINTS", "TOKEN_ENV", "USER_ENV", "Caller", "Endpoint", "Over", "Rule", "Who"]
