"""The routes of mtx-serve in one table: what each answers, and how the layers in front of the
routes treat it. `mtx.serving.access` lets the public ones through without the token and checks
where the others come from, `mtx.serving.admission` always answers the probes, and
`mtx.serving.intake` reads a JSON body only for the routes that take one. The app registers each
row's handler (a method of `mtx.serving.app.Handlers`, named in the row), and the 404 answer and
the startup line list the table. The tests check that
docs/serving.md's API table names the same routes, so every list of routes comes from this one.
"""
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    answer: str            # what it answers, in a few words
    handler: Optional[str]  # the `mtx.serving.app.Handlers` method that answers it, or None
    public: bool = False   # answered without the token
    probe: bool = False    # answered whatever the load (liveness, readiness)
    body: bool = False     # takes a JSON body: the model's work
    session: bool = False  # the page's sign-in (`mtx.serving.access`), on a server with a token

    @property
    def work(self):
        """Does work or changes state, so a request that another site's page sent is refused."""
        return self.method != "GET"


ROUTES = (
    Route("GET", "/", "the page", "page", public=True),
    Route("GET", "/health", "liveness", "health", public=True, probe=True),
    Route("GET", "/ready", "readiness", "ready", probe=True),
    Route("GET", "/info", "the run's description", "info"),
    Route("GET", "/heads", "the run's head study", "heads"),
    Route("POST", "/translate", "translations", "translate", body=True),
    Route("POST", "/attention", "one sentence's translation and attention", "attention",
          body=True),
    # the sign-in: answered by `mtx.serving.access`, in front of the app
    Route("POST", "/login", "the page's sign-in cookie", None, session=True),
    Route("POST", "/logout", "the sign-in cookie revoked", None, session=True),
)
_BY_KEY = {(route.method, route.path): route for route in ROUTES}


def route_of(scope):
    """The `Route` an ASGI scope asks for, or None (not a route, or not with that method)."""
    return _BY_KEY.get((scope["method"], scope["path"]))


def listing():
    """'GET /, /health, ...; POST /translate, ...': every route, by method."""
    by_method = {}
    for route in ROUTES:
        by_method.setdefault(route.method, []).append(route.path)
    return "; ".join(f"{method} {', '.join(paths)}" for method, paths in by_method.items())
