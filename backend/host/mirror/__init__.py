"""The mirror helper, run on each end of a copy: `main` answers the requests (the module the
controller sends), `read` lists and streams a folder, `write` receives one and renames it into
place once proven, `common` holds what both ends share. Standard library and `host/lib` only,
Python 3.8."""
