"""Backends. Each module imports only its own driver; connect() picks one lazily."""
