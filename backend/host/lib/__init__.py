"""The host library: every rule about a host, written once.

Stdlib only, Python 3.8+, importing nothing from fleetdeck outside this package and nothing
from third parties (an import-linter contract holds it). The controller, the trainer and the
tests import these modules directly; helpers that run on a host carry them in their payload
(`fleetdeck.backend.fleet.link.bundle`), registered in `sys.modules` under these same names.
"""
