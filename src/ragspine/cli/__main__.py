"""``python -m ragspine.cli``."""

import sys

from ragspine.cli.main import main

sys.exit(main())
