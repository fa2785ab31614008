"""URLs for the integration's views: ``path("accounts/", include("portcullis_client.django.urls"))``
before ``django.contrib.auth.urls``, whose other views (logout, password change, the
reset's confirm and done pages) stay Django's.

- ``login/`` (``login``): :class:`~portcullis_client.django.views.LoginView`;
- ``login/code/`` (``portcullis-code``): :class:`~portcullis_client.django.views.CodeView`;
- ``password_reset/`` (``password_reset``): :class:`~portcullis_client.django.views.PasswordResetView`.
"""

from __future__ import annotations

from django.urls import path

from .views import CodeView, LoginView, PasswordResetView

urlpatterns = [
    path("login/", LoginView.as_view(), name="login"),
    path("login/code/", CodeView.as_view(), name="portcullis-code"),
    path("password_reset/", PasswordResetView.as_view(), name="password_reset"),
]
