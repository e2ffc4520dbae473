"""`python -m rig.relay ...`: the relay process (rig.relay.process.main)."""

import sys

from rig.relay.process import main

sys.exit(main(sys.argv[1:]))
