"""Everything that runs inside one supervised agent (or connector) process."""
