"""The integration's views first, then Django's own auth views (logout, reset pages)."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def welcome(request: HttpRequest) -> HttpResponse:
    """Who is signed in."""
    return HttpResponse(f"welcome {request.user.get_username()}" if request.user.is_authenticated else "anonymous")


urlpatterns = [
    path("accounts/", include("portcullis_client.django.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("welcome/", welcome),
]
