"""Before the loop: the machine's profile (system), the memory estimate, the tiers that fit a
spec to the machine."""
