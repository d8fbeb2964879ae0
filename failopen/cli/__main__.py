"""``python -m failopen.cli``: the ``failopen`` command without its script."""

from __future__ import annotations

import sys

from failopen.cli.command import main

sys.exit(main())
