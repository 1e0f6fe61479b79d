"""The `opgen` command of the wheel, and `python -m opgen`: runs the native opgen in this
process's place, with the same arguments."""

import os
import sys

from . import EXECUTABLE


def main() -> None:
    os.execv(EXECUTABLE, ["opgen", *sys.argv[1:]])


if __name__ == "__main__":
    main()
