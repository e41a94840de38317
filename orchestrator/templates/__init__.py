"""Text that goondan writes for the user: bundle templates (`goondan init`) and systemd units.

Kept as Python modules, not data files, so they ship with the package like any other code.
"""
