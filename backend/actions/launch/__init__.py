"""Launch, controller side: `main` (RUN.toml read for the host, the pre-flight and the start
asked through their fronts), `values` (the run file's values checked), `result` (what a launch
reports and audits), `seen` (a launched run seen by the probe afterwards).

Imports the standard library, `backend.fleet`, `backend.host` (the launch helper's wire and
estimates) and the actions' audit log and fronts; never the dashboard or the CLI.
"""
