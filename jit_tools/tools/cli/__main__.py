"""``python -m jit_tools.tools.cli``, the same as ``python -m jit_loader``."""

import sys

from jit_tools.tools.cli import main

sys.exit(main())
