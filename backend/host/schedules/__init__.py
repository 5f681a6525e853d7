"""The schedules helper, run on the host whose schedule is removed: `main` answers the
requests (the module the controller sends), one module per kind of schedule (`cron` for
crontab lines and cron files, `timers`, `at`, `loops`), and `common`. Standard library and
`host/lib` only, Python 3.8."""
