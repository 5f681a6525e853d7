"""Reusable widgets and cell renderers of the dashboard.

Imports textual, rich and the backend's models; never a screen or the app.
"""
