"""``python -m broker`` == the ``chronolog`` command."""

import sys

from broker.cli import main

sys.exit(main())
