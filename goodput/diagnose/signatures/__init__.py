"""The versioned failure-signature catalogue and its matcher.

`default_catalogue()` loads the rules shipped as TOML under `goodput/diagnose/signatures/data/` once per
process. The live detectors and the offline `goodput classify` command both go through it, so a
rule behaves the same in an incident and in a post-mortem.
"""

from __future__ import annotations

from functools import cache

from goodput.diagnose.signatures.loader import CatalogueError, load_packaged
from goodput.diagnose.signatures.matcher import MAX_SCAN_CHARS, Catalogue
from goodput.diagnose.signatures.model import ROLE_ORDER, LineContext, Match, Role, Signature
from goodput.diagnose.signatures.prefixes import split_prefix

__all__ = ["MAX_SCAN_CHARS", "ROLE_ORDER", "Catalogue", "CatalogueError", "LineContext", "Match", "Role",
           "Signature", "default_catalogue", "split_prefix"]


@cache
def default_catalogue() -> Catalogue:
    # imported here: the modules that synthesise signatures use the catalogue's own package
    from goodput.diagnose.signatures.derived import derived_signatures

    version, signatures = load_packaged()
    return Catalogue(signatures, version=version, derived=derived_signatures())
