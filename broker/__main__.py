import sys

from raftka.broker.launch import main

sys.exit(main())
