import sys

from autoswitch.app.cli import main

sys.exit(main())
