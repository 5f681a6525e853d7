"""The launch helper, run on the training host: `main` answers `preflight` and `launch` (the
module the controller sends), `estimate` sizes a run (parameters, GPU memory, disk), `runfiles`
reads and writes run.json, train.log and the host's RUN.toml, and `supervise` is the detached
supervisor that starts the trainer. Standard library and `host/lib` only, Python 3.8."""
