"""run/measure."""
