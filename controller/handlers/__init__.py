"""handlers layer."""
