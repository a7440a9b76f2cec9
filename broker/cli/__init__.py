"""The ``broker`` command line."""
