"""The actions an operator takes on a host: purge, mirror, launch, stop or signal a process,
remove a schedule, and the audit log every one of them writes.

Imports `backend.fleet` and `backend.host` below it; never the monitor, the dashboard or the CLI
(the layers contract in pyproject.toml holds it).
"""
