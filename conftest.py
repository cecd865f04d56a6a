"""Workspace-wide pytest settings.

Under CI (`CI=true`), Hypothesis runs derandomized so a landing never depends on a lucky draw; run
locally, it explores new examples every time (and remembers failures in .hypothesis/).
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
