"""A minimal Django project for the integration's tests (tests/test_django*.py)."""
