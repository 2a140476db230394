"""``python -m onlstm …`` (what ``torchrun … -m onlstm lm train …`` runs)."""

import sys

from .cli import main

sys.exit(main())
