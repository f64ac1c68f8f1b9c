"""``python -m lockworker.cli``: the same as the ``lockworker`` command."""

from __future__ import annotations

import sys

from lockworker.cli.main import main

sys.exit(main())
