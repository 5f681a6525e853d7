"""Purge's facts of use: the processes that hold anything under a purged path (open, mapped,
or as their cwd or root: `scan_proc`, which `holders` asks too) and every container's mounts
(`docker_facts`). `verdict` judges them (`in-use`, `container-mount`, ...)."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os

from fleetdeck.backend.host.lib import docker, fsinfo, procfs

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Sequence, Tuple

GONE = (errno.ENOENT, errno.ESRCH)


def docker_facts() -> Dict[str, Any]:
    """Every container's mounts (stopped ones too), or why the engine could not be asked."""
    q = docker.query(all_containers=True, errors="surrogateescape")
    if not q["exe"]:
        return {"present": False, "state": "absent", "mounts": []}
    if q["failed"] in (None, "json"):
        if not q["ids"]:
            return {"present": True, "state": "ok", "containers": 0, "mounts": []}
        mounts: List[Dict[str, Any]] = []
        try:
            if q["failed"]:
                raise q["error"]
            for c in q["docs"]:
                for m in c.get("Mounts") or []:
                    mounts.append(
                        {
                            "id": c.get("Id", "")[:12],
                            "name": c.get("Name", "").lstrip("/"),
                            "source": m.get("Source") or "",
                            "destination": m.get("Destination"),
                            "running": bool((c.get("State") or {}).get("Running")),
                        }
                    )
        except (ValueError, AttributeError, TypeError) as e:
            return {
                "present": True,
                "state": "error",
                "error": "docker inspect: %s" % e,
                "mounts": [],
            }
        return {"present": True, "state": "ok", "containers": len(q["ids"]), "mounts": mounts}
    r = q["result"]
    text = r.err.decode("utf-8", "replace").strip()
    # judged on the line about the daemon: a config-file warning may say "permission denied" too
    daemon = next(
        (ln for ln in reversed(text.splitlines()) if "docker daemon" in ln.lower()), ""
    ).lower()
    # a daemon that is not running runs no container; one we may not ask might run many
    state = (
        "denied"
        if "permission denied" in daemon
        else ("down" if "cannot connect to the docker daemon" in daemon else "error")
    )
    return {
        "present": True,
        "state": state,
        "error": text.splitlines()[-1] if text else "exit %d" % r.rc,
        "mounts": [],
    }


def _readlink(p: str) -> Optional[str]:
    try:
        return os.readlink(p)
    except OSError:
        return None


def scan_proc(
    index: Dict[Tuple[int, int], int], tops: Sequence[Optional[str]]
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Processes using anything in `index` ((dev, ino) -> path number): open fds, mappings
    (device and inode; a name under a purged path also counts), cwd and root."""
    me = os.getpid()
    holders: List[Dict[str, Any]] = []
    unreadable: List[Dict[str, Any]] = []
    ancestors = set(procfs.ancestors())

    def hold(
        key: Tuple[int, int], name: Optional[str], pid: int, how: str, what: Optional[str]
    ) -> None:
        i = index.get(key)
        if i is None and name is not None:
            i = next((n for n, t in enumerate(tops) if t and fsinfo.under(name, t)), None)
        if i is not None:
            holders.append(
                {"index": i, "pid": pid, "how": how, "file": what, "comm": procfs.comm(pid)}
            )

    for pid in procfs.pids():
        if pid == me or procfs.is_kernel_thread(pid):
            continue
        base = "/proc/%d" % pid
        try:
            for how in ("cwd", "root"):
                st = os.stat(base + "/" + how)
                hold((st.st_dev, st.st_ino), None, pid, how, _readlink(base + "/" + how))
            for fdname in os.listdir(base + "/fd"):
                try:
                    st = os.stat(base + "/fd/" + fdname)
                except OSError as e:
                    if e.errno in GONE:
                        continue
                    raise
                target = _readlink(base + "/fd/" + fdname)
                name = target[:-10] if target and target.endswith(" (deleted)") else target
                hold(
                    (st.st_dev, st.st_ino),
                    name if name and name.startswith("/") else None,
                    pid,
                    "fd",
                    target,
                )
            for line in procfs.read_bytes(base + "/maps", limit=1 << 26).splitlines():
                parts = line.split(None, 5)
                if len(parts) < 5 or parts[4] == b"0":
                    continue
                major, minor = parts[3].split(b":")
                name = os.fsdecode(parts[5].strip()) if len(parts) > 5 else None
                if name and name.endswith(" (deleted)"):
                    name = name[:-10]
                hold(
                    (os.makedev(int(major, 16), int(minor, 16)), int(parts[4])),
                    name,
                    pid,
                    "maps",
                    name,
                )
        except OSError as e:
            if e.errno in GONE:
                continue
            unreadable.append(
                {
                    "pid": pid,
                    "comm": procfs.comm(pid),
                    "ancestor": pid in ancestors,
                    "error": "%s: %s" % (e.filename or base, e.strerror),
                }
            )
    seen, uniq = set(), []
    for h in holders:
        k = (h["index"], h["pid"], h["how"], h["file"])
        if k not in seen:
            seen.add(k)
            uniq.append(h)
    return uniq, unreadable
