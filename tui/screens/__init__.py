"""The dashboard's screens (views) and modals."""
