"""Poll history: the SQLite store under the state folder (`store`), its connection and schema
(`db`), what each figure is and how it folds (`figures`), reading a window (`query`), the rules
a host's values pass on their way in (`values`), an alert's `since` from the history's events
(`alert_starts`) and one card's incident on one time axis (`incident`).

Imports the standard library (`sqlite3`), `backend.fleet`, `backend.host.lib` and the monitor's
alert rules; never the dashboard or the CLI.
"""
