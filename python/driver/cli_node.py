"""Verbs for the nodes themselves: rendering cloud-init and the local rehearsal cluster.

Kept apart from cli.py (the job verbs) so the two grow independently; ``build_parser`` calls
:func:`register` to add them.
"""

from __future__ import annotations

import argparse


def register(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the node verbs to the top-level parser."""
