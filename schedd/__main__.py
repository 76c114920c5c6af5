import sys

from schedd.runtime.cli import main

sys.exit(main())
