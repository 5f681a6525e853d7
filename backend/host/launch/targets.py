"""Which modules LoRA adapts: `target_modules` matched against the base model's Linear
modules before the model is built (stdlib only, Python 3.8 or newer), for launch's pre-flight.
"""

from __future__ import annotations

import os
import struct

from fleetdeck.backend.host.launch.resources import check
from fleetdeck.backend.host.launch.shapes import ARCHS, safetensors_header

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Set, Tuple

    from fleetdeck.backend.host.launch.wire import Check

#: the Linear modules of every layer of a built-in (Qwen3-shaped) architecture
ARCH_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def linear_names(base: str) -> Tuple[Optional[Set[str]], str]:
    """(the leaf names of the base model's 2-D weights, where they were read), or (None, why)
    when they cannot be known before the model is built (a hybrid built-in, no safetensors)."""
    if base.startswith("random:"):
        arch = base.split(":", 1)[1]
        if arch in ARCHS:
            return set(ARCH_LINEARS), "built-in architecture %s" % arch
        return None, "the architecture %s is known only once it is built" % arch
    files = sorted(f for f in os.listdir(base) if f.endswith(".safetensors"))
    if not files:
        return None, "no safetensors header to read"
    names: Set[str] = set()
    for name in files:
        for tensor, meta in safetensors_header(os.path.join(base, name)).items():
            parts = tensor.split(".")
            if (
                tensor != "__metadata__"
                and len(meta.get("shape") or []) == 2
                and len(parts) >= 2
                and parts[-1] == "weight"
            ):
                names.add(parts[-2])
    return names, "the safetensors headers of %s" % base


def check_targets(checks: List[Check], config: Dict[str, Any]) -> bool:
    """`target-modules`: every name in target_modules matches a Linear module of the base model
    when its modules can be known now (a built-in architecture, a local safetensors checkpoint);
    otherwise the trainer judges them when it builds the model, and the check says so."""
    targets = list(config.get("target_modules") or ARCH_LINEARS)
    try:
        names, where = linear_names(str(config["base_model"]))
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        names, where = None, "the base model's weights could not be read (%s)" % e
    if names is None:
        return check(
            checks,
            "target-modules",
            True,
            "target_modules %s are matched when the model is built (%s)"
            % (", ".join(targets), where),
        )
    # the trainer also takes a module's full dotted name; only a leaf name is judged here
    bad = [t for t in targets if "." not in t and t not in names]
    if bad:
        return check(
            checks,
            "target-modules",
            False,
            "target_modules %s match%s no Linear module of the base model (%s has %s)"
            % (
                ", ".join(repr(t) for t in bad),
                "es" if len(bad) == 1 else "",
                where,
                ", ".join(sorted(names)[:12]) or "none",
            ),
        )
    return check(
        checks,
        "target-modules",
        True,
        "target_modules %s each match Linear modules (%s)" % (", ".join(targets), where),
    )
