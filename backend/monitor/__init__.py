"""The monitor: alerts and their state, delivery (hooks, webhooks, Alertmanager), silences,
poll history, the Prometheus export and `fleetdeck watch`, the service that runs them.

Imports `backend.actions`, `backend.fleet` and `backend.host`; never the dashboard or the CLI.
"""
