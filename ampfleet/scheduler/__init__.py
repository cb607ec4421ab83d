"""Placement (pure functions) and the scheduler process loop."""
