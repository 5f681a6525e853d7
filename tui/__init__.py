"""The dashboard: the Textual app, its views, modals and widgets, and the state it keeps.

Imports the backend (never asyncssh or the training stack: import-linter contracts hold both);
the CLI imports it, never the other way.
"""
