import sys

from autoswitch.cli import main

sys.exit(main())
