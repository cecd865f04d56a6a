"""`python -m paravt.train ...` is `paravt-train ...` (handy under torchrun)."""

import sys

from paravt.train.cli import main

sys.exit(main())
