"""``python -m vla_edge.cli``: the ``vla-edge`` command."""

import sys

from vla_edge.cli import main

sys.exit(main())
