"""The control layer: everything that talks to Ray or the database.

The controller actor and its helpers (convert, drivers, nodes), head start/stop (head), installing the controller
(install), the store (SQLAlchemy), the Ray Jobs launcher, metrics and the Grafana dashboard, history export, and the
records the controller hands to clients.
"""
