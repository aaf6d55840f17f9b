import sys

from budgetsvm.cli import main

sys.exit(main())
