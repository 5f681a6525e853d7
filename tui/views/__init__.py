"""The dashboard's views, one screen per module (Fleet, Host, Runs, Schedules, Alerts, History,
Audit), their shared base (`base`) and the pure parts they draw with (`seats_panel`,
`proc_tree`).

Imports textual, the widgets, the modals, the app's state, `fleetdeck.show` and the backend;
the app module only for type checking.
"""
