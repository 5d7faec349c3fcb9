"""Runs INSIDE a bundle's own venv, with cwd = the bundle: load it the way the platform does.

test_bundles.py passes this file's text to ``python -E -s -c`` so that, as on Cloud Functions and
App Engine, the bundle directory is first on sys.path and nothing from the repository's venv,
PYTHONPATH or user site can fill a gap in requirements.txt. Only the standard library and what
the bundle's requirements.txt installed may be imported here.

    argv: KIND TARGET        KIND is function (TARGET = entry point) or relay (TARGET = the
                             gunicorn app spec from app.yaml's entrypoint, e.g. main:create_app();
                             the Cloud Run one, cloud_run:create_app(), is loaded too)

For each backend variant (firestore, redis; for the relay also both auth modes) the probe builds
the real runtime objects: every client is created (none connects: the emulator hosts point at a
closed port), so a dependency imported lazily, e.g. redis, must be installed too. Prints one JSON
line with what it checked; any failure is an exception and a non-zero exit.
"""

import importlib
import json
import os
import pkgutil
import sys
from pathlib import Path

BUNDLE = Path.cwd().resolve()
CLOSED = "127.0.0.1:9"  # discard port: clients are built, never used

BASE_ENV = {
    "GOOGLE_CLOUD_PROJECT": "bundle-probe",
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
    "PUBSUB_EMULATOR_HOST": CLOSED,
    "FIRESTORE_EMULATOR_HOST": CLOSED,
    "CLOUD_TASKS_EMULATOR_HOST": CLOSED,
    "PUBSUB_TOOLKIT_TASKS_QUEUE": (
        "projects/bundle-probe/locations/europe-west1/queues/pubsub-toolkit-delay"
    ),
}
OIDC_ENV = {
    "PUBSUB_TOOLKIT_TASKS_TARGET": "http",
    "PUBSUB_TOOLKIT_RELAY_URL": "https://bundle-probe.ew.r.appspot.com",
    "PUBSUB_TOOLKIT_RELAY_AUTH": "oidc",
    "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT": (
        "ptk-tasks-invoker@bundle-probe.iam.gserviceaccount.com"
    ),
}
APPENGINE_ENV = {
    "PUBSUB_TOOLKIT_TASKS_TARGET": "appengine",
    "PUBSUB_TOOLKIT_RELAY_AUTH": "appengine",
}
VARIANTS = {
    "firestore+oidc": {"PUBSUB_TOOLKIT_STORE_BACKEND": "firestore", **OIDC_ENV},
    "redis+appengine": {
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": f"redis://{CLOSED}/0",
        **APPENGINE_ENV,
    },
}
CLOUD_RUN_APP = "cloud_run:create_app()"  # appengine/relay/Dockerfile's CMD
# Entry point -> the module-level factory it calls on the first event, and its cache global.
FUNCTION_FACTORIES = {
    "ingress": ("_get_ingress", "_ingress"),
    "consumer": ("_get_processor", "_processor"),
}


def in_bundle(module: object) -> bool:
    return Path(getattr(module, "__file__", "/")).resolve().is_relative_to(BUNDLE)


def import_library() -> list[str]:
    """Import every module of the library copied into the bundle (build-bundles leaves out the
    operator's CLI and status page)."""
    import pubsub_toolkit

    assert in_bundle(pubsub_toolkit), f"pubsub_toolkit comes from {pubsub_toolkit.__file__}"
    names = []
    for info in pkgutil.walk_packages(pubsub_toolkit.__path__, "pubsub_toolkit."):
        importlib.import_module(info.name)
        names.append(info.name)
    return names


def probe_function(target: str) -> dict[str, object]:
    import functions_framework

    # What the Python runtime does: functions-framework loads main.py and the --target function
    # and checks it was registered as a CloudEvent function.
    app = functions_framework.create_app(
        target=target, source=str(BUNDLE / "main.py"), signature_type="http"
    )
    main = sys.modules["main"]
    assert in_bundle(main), main.__file__
    assert app is not None
    factory, cache = FUNCTION_FACTORIES[target]
    for variant, env in VARIANTS.items():
        os.environ.update(BASE_ENV | env)
        if target == "consumer":
            os.environ.update(
                PUBSUB_TOOLKIT_CONSUMER_ID="probe", PUBSUB_TOOLKIT_HANDLER="example_handler:handle"
            )
        setattr(main, cache, None)
        built = getattr(main, factory)()
        assert built is not None, variant
    return {"entry_point": target}


def probe_relay(app_spec: str) -> dict[str, object]:
    from gunicorn.util import import_app

    for variant, env in VARIANTS.items():
        os.environ.update(BASE_ENV | env)
        app = import_app(app_spec)  # gunicorn's own loader, as `gunicorn ... 'main:create_app()'`
        assert callable(app), variant
        assert app.test_client().get("/healthz").status_code == 200, variant
    assert in_bundle(sys.modules["main"])
    # The Cloud Run entry point (the Dockerfile's CMD) from the same bundle and requirements.
    os.environ.update(BASE_ENV | OIDC_ENV | {"PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM": "true"})
    app = import_app(CLOUD_RUN_APP)
    assert app.test_client().get("/healthz").status_code == 200, CLOUD_RUN_APP
    assert in_bundle(sys.modules["cloud_run"])
    verify_oidc_token()
    return {"app": app_spec, "cloud_run_app": CLOUD_RUN_APP}


def verify_oidc_token() -> None:
    """The relay's OIDC check needs an RSA verifier from google-auth's dependencies."""
    from google.auth import jwt

    token, cert = os.environ["PROBE_OIDC_TOKEN"], os.environ["PROBE_OIDC_CERT"]
    claims = jwt.decode(token, certs={"probe": cert}, audience=OIDC_ENV["PUBSUB_TOOLKIT_RELAY_URL"])
    assert claims["email"] == OIDC_ENV["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"], claims


def main() -> None:
    kind, target = sys.argv[1], sys.argv[2]
    result = probe_function(target) if kind == "function" else probe_relay(target)
    import redis.utils

    # requirements.txt asks for redis[hiredis]: the C parser must really be there.
    assert redis.utils.HIREDIS_AVAILABLE, "hiredis is not importable"
    result["modules"] = import_library()
    result["python"] = sys.version.split()[0]
    print(json.dumps(result))


main()
