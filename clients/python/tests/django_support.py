"""The test Django project (tests/django_project), set up once per process: sqlite in a
temporary directory, migrated; and what the Django tests share."""

from __future__ import annotations

import os
import pathlib
import re
import tempfile

#: The daemon configuration of the Django tests: two realms whose hash target is what
#: Django 5.2 writes by default (PBKDF2-SHA256, 1,000,000 iterations), so an unknown
#: identifier costs what a known one does; ``stepup`` also challenges unknown devices.
#: ``argon2default`` keeps the daemon's default target (argon2id), the mistake a site
#: makes by leaving the realm's hash target out.
DAEMON_CONFIG = """shutdown_delay = "0s"
[store]
operation_timeout = "5s"
[realms.django.hash]
algorithm = "pbkdf2_sha256"
pbkdf2_iterations = 1000000
[realms.stepup]
unknown_device = "step_up"
[realms.stepup.hash]
algorithm = "pbkdf2_sha256"
pbkdf2_iterations = 1000000
[realms.argon2default]
unknown_device = "allow"
"""

PASSWORD = "correct horse battery staple"
_ready = False


def setup(endpoint: str) -> None:
    """Configures Django for this process (once): the project's settings, a new sqlite
    file in a temporary directory, the daemon at ``endpoint``."""
    global _ready
    if _ready:
        return
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="portcullis-django-"))
    os.environ["PORTCULLIS_DJANGO_DB"] = str(tmp / "db.sqlite3")
    os.environ["PORTCULLIS_DJANGO_ENDPOINT"] = endpoint
    os.environ["DJANGO_SETTINGS_MODULE"] = "django_project.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    _ready = True


def user(username: str, password: str = PASSWORD, email: str | None = None):
    """A user with Django's default hasher (made once per name)."""
    from django.contrib.auth.models import User

    found = User.objects.filter(username=username).first()
    if found is None:
        found = User.objects.create_user(username, email=email or f"{username}@example.com", password=password)
    return found


def masked(body: bytes) -> bytes:
    """A page without its per-request CSRF token, to compare two pages byte for byte."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b'name="csrfmiddlewaretoken" value="-"', body)
