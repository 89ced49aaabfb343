"""``python -m axon_eg.cli``: the ``axon-eg`` command."""

import sys

from axon_eg.cli import main

sys.exit(main())
