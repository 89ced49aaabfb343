"""The benchmark suite under its old name: this module *is* ``axon_eg.suite`` (one module object, so
``benchmarks.suite.SuiteProgram is axon_eg.suite.SuiteProgram`` and private helpers stay reachable).

The programs moved into the package so that an installed ``axon-eg`` can offer them; the benchmark
scripts and the tests keep importing ``benchmarks.suite``.
"""

import sys

from axon_eg import suite as _suite

sys.modules[__name__] = _suite
