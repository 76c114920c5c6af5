import sys

from schedd_worker.cli import main

sys.exit(main())
