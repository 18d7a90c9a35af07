"""Shared settings for the liblb test suite."""

from __future__ import annotations

import os

from hypothesis import settings

# Deterministic property tests (same examples on every run and machine), no example database
# written into the work tree, and no deadline: the test machine is shared and timing is noise.
settings.register_profile(
    "liblb",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("LIBLB_HYPOTHESIS_EXAMPLES", "100")),
)
settings.load_profile("liblb")
