"""providers layer."""
