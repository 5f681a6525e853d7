"""The errors every layer of the controller may raise, kept apart so that importing one never
pulls in another module's dependencies (config parses `[alerts]`, and the alert rules raise
`ConfigError`: with the class here neither imports the other in a circle)."""

from __future__ import annotations


class ConfigError(Exception):
    """A fleet file (or RUN.toml) that cannot be used; the message names file, host and key."""
