"""`python -m es_provider.cli`."""

import sys

from es_provider.cli import main

sys.exit(main())
