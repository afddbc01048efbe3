"""``python -m tilejit``: the same command line as the ``tilejit`` script."""

from __future__ import annotations

import sys

from tilejit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
