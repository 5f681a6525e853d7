"""`python -m fleetdeck.backend.train RUN.toml`: the trainer's own entry point (what `launch`
starts on a host; it needs the package and its `train` extra there, not the dashboard)."""

import sys

from .main import train_main

if __name__ == "__main__":
    sys.exit(train_main())
