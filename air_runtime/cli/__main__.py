"""``python -m air_runtime.cli`` is the same as ``airo``."""

import sys

from air_runtime.cli import main

sys.exit(main())
