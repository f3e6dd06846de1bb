"""run/slot."""
