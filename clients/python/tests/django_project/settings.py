"""The test project's settings: Django's defaults where a site keeps them (the password
hashers above all: PBKDF2, ``pbkdf2_sha256$1000000$…`` in Django 5.2), sqlite in the
file ``PORTCULLIS_DJANGO_DB`` names (a temporary directory), and the daemon
``PORTCULLIS_DJANGO_ENDPOINT`` names."""

import os
import pathlib

SECRET_KEY = "portcullis-django-tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "portcullis_client.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portcullis_client.django.http.DeviceCookieMiddleware",
]
ROOT_URLCONF = "django_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [pathlib.Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["PORTCULLIS_DJANGO_DB"]}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
LOGIN_REDIRECT_URL = "/welcome/"
AUTHENTICATION_BACKENDS = ["portcullis_client.django.backend.PortcullisBackend"]
PORTCULLIS = {
    "ENDPOINTS": [os.environ.get("PORTCULLIS_DJANGO_ENDPOINT", "http://127.0.0.1:50051")],
    "REALM": os.environ.get("PORTCULLIS_DJANGO_REALM", "django"),
    "CLIENT": {"call_timeout": 5.0},
    "CHECK_CODE": "django_project.codes.check_code",
}
