"""run/checks."""
