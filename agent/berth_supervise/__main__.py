"""`python -m berth_supervise`: the registry container's command (the console script berth-supervise)."""

from .main import main

raise SystemExit(main())
