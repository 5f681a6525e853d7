"""What runs on a host: the probe and the action helpers (purge, mirror, launch, logs,
schedules, processes, holders), sent as a payload and run with `python3 -`, and `lib`, the rules
about a host written once.

Standard library only, Python 3.8+; imports nothing from the controller, the dashboard or the
trainer (an import-linter contract holds it).
"""
