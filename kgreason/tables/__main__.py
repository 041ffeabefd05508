"""``python -m kgreason.tables``."""

import sys

from kgreason.tables.cli import main

sys.exit(main())
