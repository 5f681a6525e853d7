"""asyncssh, imported quietly: the one place the product imports it.

asyncssh (2.24 and earlier) names cryptography's DSA classes in its type hints, and
cryptography 51 warns on every such access (`CryptographyDeprecationWarning: DSA is
deprecated`), ten lines on stderr before any command prints. Exactly that warning, raised from
asyncssh's own modules, is ignored; every other warning (cryptography's elsewhere included)
is left as it was. fleetdeck offers no DSA key of its own (connect.py names ed25519, ecdsa and
rsa key files only).
"""

from __future__ import annotations

import warnings

try:
    from cryptography.utils import CryptographyDeprecationWarning
except ImportError:  # pragma: no cover - asyncssh requires cryptography
    CryptographyDeprecationWarning = DeprecationWarning  # type: ignore[assignment,misc]

# a filter that stays: asyncssh touches `dsa.*` again when it loads a key file or parses a
# peer's key, not only at import
warnings.filterwarnings(
    "ignore",
    message=r"DSA is deprecated",
    category=CryptographyDeprecationWarning,
    module=r"asyncssh(\.|$)",
)

import asyncssh as asyncssh  # noqa: E402  (the filter must be in place first)

__all__ = ["asyncssh"]
