import sys

from raftka.broker.cli import main

sys.exit(main())
