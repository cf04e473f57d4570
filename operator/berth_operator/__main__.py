"""python -m berth_operator: the same as the berth-operator command."""

import sys

from .cli import main

sys.exit(main())
