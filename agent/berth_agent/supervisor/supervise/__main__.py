"""`python -m berth_agent.supervisor.supervise`: the registry container's command."""

from .main import main

raise SystemExit(main())
