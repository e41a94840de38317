import sys

from protocol.norich import WithoutRich

with WithoutRich():  # protocol/norich.py says why
    from agent_process.child import main

sys.exit(main())
