"""``import cupyx`` under ``make test-gpu``: the fake's ``cupyx`` (see ``../cupy``)."""
import sys

import cupy  # noqa: F401  (registers the fake ``cupyx`` in sys.modules)

sys.modules[__name__] = sys.modules["cupyx"]
