"""The integration's Django app: its templates and its system checks."""

from __future__ import annotations

from django.apps import AppConfig


class PortcullisConfig(AppConfig):
    """``INSTALLED_APPS += ["portcullis_client.django"]`` (label ``portcullis``)."""

    name = "portcullis_client.django"
    label = "portcullis"
    verbose_name = "Portcullis"

    def ready(self) -> None:
        """Registers the system checks."""
        from . import checks  # noqa: F401 - registers on import
