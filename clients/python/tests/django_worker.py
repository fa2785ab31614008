"""A Django process for tests/test_django.py: the test project on the sqlite file and
daemon the environment names (PORTCULLIS_DJANGO_DB, PORTCULLIS_DJANGO_ENDPOINT), posting
logins with Django's test Client, one JSON line per login.

    python django_worker.py REMOTE_ADDR USERNAME PASSWORD...
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_project.settings")

import django  # noqa: E402

django.setup()

from django.test import Client  # noqa: E402


def main() -> None:
    remote_addr, username, *passwords = sys.argv[1:]
    for password in passwords:
        browser = Client(REMOTE_ADDR=remote_addr)
        response = browser.post("/accounts/login/", {"username": username, "password": password})
        outcome = getattr(response.wsgi_request, "portcullis_login", None)
        print(
            json.dumps(
                {
                    "status": response.status_code,
                    "kind": outcome.kind.value if outcome is not None else None,
                    "signed_in": "_auth_user_id" in browser.session,
                    "pid": os.getpid(),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
