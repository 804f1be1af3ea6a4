"""`python -m flywheel.gate`."""

import sys

from flywheel.gate.cli import main

if __name__ == "__main__":
    sys.exit(main())
