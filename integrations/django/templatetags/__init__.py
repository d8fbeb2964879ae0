"""Package marker (Django discovers this by name)."""
