"""run/guards."""
