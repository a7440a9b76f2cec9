"""``bench/queue.py``: the marker-queue benchmark (it runs ``bench/kafka_queue.py``; see there).

A script named ``queue.py`` puts its folder first on ``sys.path``, where it would shadow the standard
library's ``queue`` module for everything imported after it (logging.handlers, concurrent.futures,
...). This launcher takes its folder off ``sys.path`` before anything else is imported.

Usage: python bench/queue.py [options of bench/kafka_queue.py]
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import runpy  # noqa: E402 - after the sys.path fix, on purpose

if __name__ == "__main__":
    runpy.run_path(os.path.join(_HERE, "kafka_queue.py"), run_name="__main__")
