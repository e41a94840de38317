import sys

from agent_process.child import main

sys.exit(main())
