"""`python -m demo` (what `make demo` runs)."""

import sys

from demo.pipeline import main

sys.exit(main())
