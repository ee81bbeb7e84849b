"""``python -m functions.migrate``: see ``functions.migrate.cli``."""

import sys

from functions.migrate.cli import main

sys.exit(main())
