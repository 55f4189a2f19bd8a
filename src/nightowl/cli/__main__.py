"""`python -m nightowl.cli`: the `nightowl` command without its console script."""

import sys

from nightowl.cli import main

sys.exit(main())
