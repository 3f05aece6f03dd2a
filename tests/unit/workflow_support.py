"""What the tests of the GitHub workflows share."""

from __future__ import annotations

import re

PINNED = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+(\.\d+){0,2}\s*$")
"""A step's ``uses:`` pinned by full commit SHA, with a ``# vX.Y.Z`` comment."""
