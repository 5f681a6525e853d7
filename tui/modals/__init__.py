"""The dashboard's pop-ups, one per module: the bases (`modal`: `Modal`; `typed_confirm`: the
template of the confirmations that change a host), the action confirmations (purge, mirror, launch, remove,
stop, silence), describe, holders, help and errors, and the filter prompt.

Imports textual, the widgets, `fleetdeck.show` and the backend; never a view, and the app
module only for type checking.
"""
