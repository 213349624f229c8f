"""``python -m resolver.cli``: the same as ``python -m resolver`` (the ``resolver`` command)."""

import sys

from resolver.cli import main

sys.exit(main())
