"""The swarm as the daemon reads it: the view a reload swaps in one step, and the Connection
ingress rules compiled from the bundle. Pure; imports no other room (docs/ARCHITECTURE.md §1).
"""
