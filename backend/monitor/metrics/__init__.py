"""Prometheus: `/metrics` of the fleet (`export`: `fleetdeck watch --prometheus`), a host's
strings and numbers as labels and samples (`values`), the per-GPU health families (`gpu`), and
the built-in alert rules as a Prometheus rules file (`rules`: `fleetdeck rules --prometheus`).

Imports the standard library, `backend.fleet`, `backend.host.lib` and the monitor's rules and
seats; never the dashboard or the CLI.
"""
