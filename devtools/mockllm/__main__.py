"""``python -m devtools.mockllm --script FILE [--host H] [--port P]``."""

import sys

from devtools.mockllm.command import main

sys.exit(main())
