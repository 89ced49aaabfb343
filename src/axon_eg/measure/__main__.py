"""``python -m axon_eg.measure BUNDLE --out FILE``: see :mod:`axon_eg.measure.worker`."""

from __future__ import annotations

import sys

from axon_eg.measure.cli import main

if __name__ == "__main__":
    sys.exit(main())
