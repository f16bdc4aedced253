"""The signatures no line matches: the verdict builder's own, which it writes from several lines.

A verdict names the signatures that decided it, and the live service weighs an incident's evidence
again from those ids (goodput.diagnose.attribution), looking each up in the catalogue for its
category, restart and drain. The verdict builder also synthesises signatures from several lines (a
recurring Xid, a driver hang, Megatron's verdict on the GPU it suspected, a collective timeout at
start-up...), and these were in no catalogue: the service fell back to a weaker id in the list, so
it could drain where `goodput classify` said not to, or keep a node `classify` drained (#25). They
are collected here from the modules that build them, so the catalogue can answer for them.
"""

from __future__ import annotations

from types import ModuleType

from goodput.diagnose.signatures import circumstances, crossline, cuda_oom, jax_tasks, nodeplatform, smi_ecc, stalls
from goodput.diagnose.signatures.model import Signature

BUILDERS: tuple[ModuleType, ...] = (circumstances, crossline, cuda_oom, jax_tasks, nodeplatform, smi_ecc, stalls)


def derived_signatures() -> tuple[Signature, ...]:
    """Every signature the builders define at module level, each once, in a stable order."""
    found: dict[str, Signature] = {}
    for module in BUILDERS:
        for value in vars(module).values():
            if isinstance(value, Signature) and found.setdefault(value.id, value) is not value:
                raise ValueError(f"two derived signatures share the id {value.id}")
    return tuple(found[key] for key in sorted(found))
