"""The Alertmanager sink: `sink` (each Alertmanager named in `[alerts] alertmanager`, fed by
`watch`), `payload` (an alert as Alertmanager's v2 API takes it), `post` (each Alertmanager as a
`Sink`), `silences` (fleetdeck's silences made and expired there too).

Imports the standard library, `backend.fleet`, `backend.host.lib` and the monitor's delivery
(the one HTTP client, the sink protocol) and silences; never the dashboard or the CLI.
"""
