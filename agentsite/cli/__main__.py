"""``python -m agentsite.cli``: the ``agents`` command."""

from agentsite.cli import main

raise SystemExit(main())
