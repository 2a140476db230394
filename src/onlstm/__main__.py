"""``python -m onlstm …`` (what ``torchrun … -m onlstm lm train …`` runs)."""

import sys

from .entry import main

sys.exit(main())
