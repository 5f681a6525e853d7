"""Reusable widgets and cell renderers of the dashboard."""
