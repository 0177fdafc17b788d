"""terminal layer."""
