import sys

from air_runtime.local._server import main

sys.exit(main())
