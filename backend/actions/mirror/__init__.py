"""The mirror action, controller side: `main` plans and runs a mirror (`mirror`, and the
endpoint a command line names), `verify` lists and compares both sides, each hashed on its
own host (`verify` the command too), `report` holds the typed plan and report and their
wording, `copy` starts both helpers, judges the copy and cleans up after a failure, `relay`
bounds every step and moves the frames between them, `common` holds what all of them share.
It may import `backend.actions.audit`, `backend.fleet` and the host library; the helper it
drives on each host is `backend/host/mirror/`."""
