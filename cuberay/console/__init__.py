"""The platform's web side: its HTTP API (``app``), served from the head by an actor of its own (``service``).

A client of the controller like the CLI: every request becomes a call of the controller's typed API with its
caller, so it passes the same access rules.
"""
