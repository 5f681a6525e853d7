"""Who reaches the web view: the address it answers on (loopback unless told otherwise:
`parse_web_listen`) and its token: one secret in the state folder (`web-token`, mode 600), made on the
first `watch --web`, shown once, rotatable (`watch --rotate-web-token`), and every request's
token compared with it in constant time.

The comparison is `hmac.compare_digest` over the SHA-256 of each side, so its time depends on
neither the length nor the content of what a stranger sent. The file is read again only when it
changed (one `stat` per request), so a rotation locks the old token out of a running `watch` at
its next request.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
import stat
import threading
from pathlib import Path

from fleetdeck.backend.fleet.statedir import read_file, state_dir

#: the token's name in the state folder
TOKEN_FILE = "web-token"
#: the longest token file read (a token is 43 characters)
TOKEN_LIMIT = 4096


class TokenRefused(OSError):
    """The token file cannot be used: `code` and one sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def token_path() -> Path:
    """`$XDG_STATE_HOME/fleetdeck/web-token`."""
    return state_dir() / TOKEN_FILE


def _write(path: Path, token: str) -> None:
    # written beside and renamed over: a reader sees the old token or the new one, never half
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def new_token(path: Path | None = None) -> str:
    """Write a fresh token (mode 600), replacing any; the token."""
    path = path or token_path()
    token = secrets.token_urlsafe(32)
    _write(path, token)
    return token


def read_token(path: Path | None = None) -> str:
    """The saved token. TokenRefused when it is missing (`no-token-file`), readable by others
    than its owner (`token-file-open`) or not a token (`token-file-bad`)."""
    path = path or token_path()
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        raise TokenRefused("no-token-file", f"there is no web token at {path}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TokenRefused("token-file-bad", f"{path} is not a regular file")
    if st.st_mode & 0o077:
        raise TokenRefused(
            "token-file-open",
            f"{path} can be read by others (mode {stat.S_IMODE(st.st_mode):o}); "
            "rotate it with `fleetdeck watch --rotate-web-token`",
        )
    text = read_file(path, TOKEN_LIMIT).decode("ascii", "replace").strip()
    if len(text) < 32 or not all(c.isalnum() or c in "-_" for c in text):
        raise TokenRefused("token-file-bad", f"{path} does not hold a token")
    return text


def ensure_token(path: Path | None = None) -> tuple[str, bool]:
    """(the token, True when it was made just now and has never been shown)."""
    path = path or token_path()
    try:
        return read_token(path), False
    except TokenRefused as e:
        if e.code != "no-token-file":
            raise
    return new_token(path), True


def parse_web_listen(text: str) -> tuple[str, int]:
    """`ADDR:PORT`, `[v6]:PORT`, `:PORT` or `PORT` -> (addr, port); with no address, loopback
    (127.0.0.1): the web view answers the network only when told to. ValueError otherwise."""
    addr, sep, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536 or (sep and not addr and text[0] != ":"):
        raise ValueError(f"--web wants ADDR:PORT (or PORT, on loopback), not {text!r}")
    return addr.strip("[]") or "127.0.0.1", int(port)


def is_loopback(addr: str) -> bool:
    """True when `addr` answers this machine only."""
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


class TokenCheck:
    """The saved token as the server checks it: read again when the file changed."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or token_path()
        self._key: tuple[int, int, int] | None = None
        self._digest = b""
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path, follow_symlinks=False)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key == self._key:
            return
        try:
            self._digest = _digest(read_token(self.path))
        except (TokenRefused, OSError):
            # no usable token: nothing matches (the server says why at its start)
            self._digest = secrets.token_bytes(32)
        self._key = key

    def matches(self, given: str | None) -> bool:
        """True when `given` is the saved token (constant time in what was given)."""
        with self._lock:
            self._refresh()
            saved = self._digest
        return hmac.compare_digest(_digest(given or ""), saved)


__all__ = [
    "is_loopback",
    "parse_web_listen",
    "TOKEN_FILE",
    "TokenCheck",
    "TokenRefused",
    "ensure_token",
    "new_token",
    "read_token",
    "token_path",
]
