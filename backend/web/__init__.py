"""The fleet in a browser, read-only (`fleetdeck watch --web ADDR:PORT`): the token that lets a
person in (`access`), what the monitor last saw (`view_state`), the pages drawn from it
(`pages`, with a run's series as SVG in `chart`) and the HTTP server (`server`, the standard
library's `http.server`), with its stylesheet and one same-origin script beside them.

Imports `backend.monitor`, `backend.fleet` and the host library's escaper; never the dashboard,
the CLI, textual or rich.
"""
