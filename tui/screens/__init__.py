"""The dashboard's screens: its views and its modals.

Imports the widgets, the app's state and the backend; the app module only for type checking.
"""
