"""``python -m kgreason ...``: the same as the ``kgreason`` command (:mod:`kgreason.cli`)."""

from kgreason.cli import main

if __name__ == "__main__":
    main()
