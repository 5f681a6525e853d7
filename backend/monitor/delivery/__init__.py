"""Delivery: each alert transition reaching every sink once. `deliver` (the deliverer), `sink`
(what every sink promises: `name` and `send(alerts) -> Outcome`), `attempts` (the command hook
and webhook sinks, one attempt within one deadline), `http_client` (the one HTTP client every
HTTP sink sends through), `payloads` (what each sink receives), `grouping` (one delivery for
transitions a sink got together), `queue` (the outbox's queues in memory), `outbox` (its journal
on disk), `outbox_entry` (one entry carrying its `Alert`), `watch_lock` (one deliverer per
state folder).

Imports the standard library, `httpx2` (in `http_client` only), `backend.fleet`,
`backend.host.lib`, the monitor's alert rules, saved state and silences; never the dashboard or
the CLI.
"""
