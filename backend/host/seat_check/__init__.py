"""The seat check helper, run on the seat's host: `main` answers `check` (the module the
controller sends), `request` asks the seat on 127.0.0.1 within one deadline, `judge` says
what its answer means. Standard library and `host/lib` only, Python 3.8."""
