"""The dashboard's pop-ups, one per module: the bases (`modal`: `Modal` and the typed
confirmation every action shares), the action confirmations (purge, mirror, launch, remove,
stop, silence), describe, holders, help and errors, and the filter prompt.

Imports textual, the widgets, `fleetdeck.show` and the backend; never a view, and the app
module only for type checking.
"""
