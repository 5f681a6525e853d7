"""The command line: `fleetdeck <command>`, one module per command (`main.py` registers them).

Imports the dashboard's renderers and the backend; the top of the layers contract.
"""
