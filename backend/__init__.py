"""fleetdeck's headless library: fleet file, SSH links, the probe, polling and actions.

Nothing here imports the dashboard, textual or rich (an import-linter contract holds it).
"""
