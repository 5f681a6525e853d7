"""The rows of the dashboard's tables as pure functions: a data object in (a host's snapshot, a
run, a schedule, the fleet state), its cells out, as rich `Text` and strings. One module per
view (`fleet`, `host`, `runs`, `schedules`, `alerts`); tested without an app.

Imports rich, `fleetdeck.show`, the backend's models and verdicts and the app's fleet state;
never textual, the widgets, the modals or the views.
"""
