"""``python -m broker``: the ``broker`` command (``python -m broker run pkg.module:app``)."""

import sys

from broker.cli.main import main

sys.exit(main())
