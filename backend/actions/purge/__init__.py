"""Purge, controller side: `main` (`gather_purge`, `execute_purge`: the helper asked through its
fronts), `plan` (`PurgePlan`), `judge` (the host's facts folded through the host's verdict into
a plan), `confirm` (the typed confirmations checked), `report` (the report and its audit record).

Imports the standard library, `backend.fleet`, `backend.host` (the purge helper's verdict and
wire) and the actions' audit log and fronts; never the dashboard or the CLI.
"""
