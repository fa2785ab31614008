"""System checks (``manage.py check``, and before every ``runserver`` and ``migrate``):

- ``portcullis.E001``: ``PORTCULLIS`` is not a valid configuration (the message names
  the setting).
- ``portcullis.E002``: ``AUTHENTICATION_BACKENDS`` lists a backend that compares
  passwords itself (``ModelBackend`` or a subclass other than ``PortcullisBackend``: a
  login the daemon refused would be tried there next) or counts attempts itself
  (django-axes' ``AxesStandaloneBackend`` or ``AxesBackend``).
- ``portcullis.W001``: ``AUTHENTICATION_BACKENDS`` does not list ``PortcullisBackend``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from . import conf
from .backend import PortcullisBackend

#: django-axes' backends, which wrap the password check of the backends after them.
_AXES = ("AxesBackend", "AxesStandaloneBackend")


@checks.register(checks.Tags.security)
def check_portcullis(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The checks in the module's text."""
    found: list[checks.CheckMessage] = []
    try:
        conf.load(getattr(settings, "PORTCULLIS", {}))
    except ImproperlyConfigured as e:
        found.append(checks.Error(str(e), id="portcullis.E001"))
    ours = False
    for path in settings.AUTHENTICATION_BACKENDS:
        try:
            backend = import_string(path)
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, PortcullisBackend):
            ours = True
        elif isinstance(backend, type) and (issubclass(backend, ModelBackend) or backend.__name__ in _AXES):
            found.append(
                checks.Error(
                    f"AUTHENTICATION_BACKENDS lists {path}, which checks passwords or counts attempts "
                    "itself: a login the daemon refused could be let in there, or counted twice",
                    hint="list portcullis_client.django.backend.PortcullisBackend instead of it",
                    id="portcullis.E002",
                )
            )
    if not ours:
        found.append(
            checks.Warning(
                "AUTHENTICATION_BACKENDS does not list portcullis_client.django.backend.PortcullisBackend",
                id="portcullis.W001",
            )
        )
    return found
