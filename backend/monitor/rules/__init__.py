"""The alert rules, judged on every poll: the engine (`alerts`: each alert firing once and
resolving once), the rules by kind (`training`, `disk`, `seats`, `gpu`, `runs`, `strays`), the
launched runs' ends read from the audit log (`launch_outcomes`) and why an alert whose subject
is gone resolved (`ends`).

Imports the standard library, `backend.fleet`, `backend.host.lib` and `backend.actions` (the
audit log); never the dashboard or the CLI.
"""
