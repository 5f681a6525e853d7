"""What the CLI and the dashboard both print with: rich renderers of the backend's snapshots
(`fmt`: hosts, messages, sizes; `charts`: history tables and sparklines; `cells`: table cells,
bars and loss charts; `incident_plot`).

Imports rich and the backend (monitor, fleet, host library); never textual, the CLI or the
dashboard.
"""
