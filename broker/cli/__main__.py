"""``python -m broker.cli``."""

import sys

from broker.cli.main import main

sys.exit(main())
