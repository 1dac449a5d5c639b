"""``python -m loaderx`` is the ``loaderx`` command."""

import sys

from .cli import main

sys.exit(main())
