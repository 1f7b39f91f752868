"""``python -m offline_prelearner``: runs the command line (:func:`offline_prelearner.cli.main`)."""

import sys

from .cli import main

sys.exit(main())
