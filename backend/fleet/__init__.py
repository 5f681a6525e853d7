"""The fleet: the fleet file and its checks, the SSH links to each host (connect, channel,
known hosts, the helper bundle), the poller and the snapshots it builds, with their verdicts.

Imports `backend.host` (the rules written once) and asyncssh; nothing above it.
"""
