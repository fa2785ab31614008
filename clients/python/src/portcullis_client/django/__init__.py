"""portcullis_client.django: Django's login behind the Portcullis daemon (the
``django`` extra).

- ``portcullis_client.django.backend.PortcullisBackend``: an authentication backend;
  ``authenticate(request, username, password)`` asks ``Verify`` with the user's stored
  hash (an empty one for an unknown user) and returns the user only for an accept.
  Every daemon failure is a refused login, raised as ``PermissionDenied`` so that
  ``django.contrib.auth.authenticate()`` tries no backend after it and returns ``None``.
- ``portcullis_client.django.views``: a ready ``LoginView`` (one page per outcome, the
  one challenge page in a ``step_up`` realm), the code step (``CodeView``,
  ``code_step``) and a ``PasswordResetView`` counted by the daemon
  (``password_reset_request``).
- ``portcullis_client.django.http.DeviceCookieMiddleware``: the device cookie, for a
  site whose own view logs in.
- ``portcullis_client.django.outcome``: the outcomes, and the ``login_outcome`` and
  ``reset_outcome`` signals.

Settings: one ``PORTCULLIS`` dict (``portcullis_client.django.conf``). Add
``"portcullis_client.django"`` to ``INSTALLED_APPS`` (templates, system checks). See
the package's DJANGO.md. Nothing is imported here, so listing the app does not
load Django's models early.
"""
