"""The links to the hosts: `ssh` (`HostLink` and its `call(helper, op, ...)`), `connect`
(connecting, backoff, refused logins), `known_hosts` (host keys checked), `channel` (a
helper's boot, payload and bounded answers), `bundle` (the helper payloads) and `localproc`
(the `local` host's processes, cancellable).

Imports asyncssh, the host wing and the fleet's config and errors; never the actions, the
monitor or a front end.
"""
