"""``python -m conslaw_lite``: the command line of :mod:`conslaw_lite.cli`."""

import sys

from conslaw_lite.cli import main

if __name__ == "__main__":
    sys.exit(main())
