"""Where the Google Cloud SDK's emulators are: the SDK root gcloud itself reports.

The Pub/Sub and Firestore emulators are SDK components. They are looked for under, in order:

1. ``$PUBSUB_TOOLKIT_SDK_ROOT``, when set (an SDK without gcloud on PATH, or a second one);
2. the root the ``gcloud`` on PATH reports (``gcloud info --format=value(installation.sdk_root)``):
   an installer's SDK in ``~/google-cloud-sdk``, Homebrew's, a snap's;
3. ``/usr/lib/google-cloud-sdk``, where the Debian and RPM packages put it.

The first root holding the component wins; when none does, the error names every root tried.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from pubsub_toolkit_local.processes import ServiceStartError

logger = logging.getLogger(__name__)

SDK_ROOT_VARIABLE = "PUBSUB_TOOLKIT_SDK_ROOT"
PACKAGED_SDK = Path("/usr/lib/google-cloud-sdk")
PUBSUB_LAUNCHER = "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
FIRESTORE_JAR = "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
_GCLOUD_TIMEOUT = 60  # seconds: gcloud's first run compiles its own Python files


def sdk_roots() -> list[Path]:
    """The SDK roots to look in, in order, without repeats."""
    roots: list[Path] = []
    configured = os.environ.get(SDK_ROOT_VARIABLE, "").strip()
    if configured:
        roots.append(Path(configured).expanduser())
    gcloud = shutil.which("gcloud")
    if gcloud is not None:
        reported = gcloud_sdk_root(gcloud)
        if reported is not None:
            roots.append(reported)
    roots.append(PACKAGED_SDK)
    return list(dict.fromkeys(roots))


@cache
def gcloud_sdk_root(gcloud: str) -> Path | None:
    """The SDK root ``gcloud`` reports (asked once per gcloud per process); None if it cannot
    say, logged: the other roots are still tried."""
    try:
        done = subprocess.run(
            [gcloud, "info", "--format=value(installation.sdk_root)"],
            capture_output=True,
            text=True,
            timeout=_GCLOUD_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("could not ask %s for its SDK root: %s", gcloud, exc)
        return None
    root = done.stdout.strip()
    if done.returncode != 0 or not root:
        logger.warning("%s info gave no SDK root (exit %s)", gcloud, done.returncode)
        return None
    return Path(root)


def find_component(relative: str, *, what: str, component: str, package: str) -> Path:
    """``relative`` under the first SDK root that has it, or ServiceStartError saying where
    it looked and how to install it."""
    roots = sdk_roots()
    for root in roots:
        if (root / relative).exists():
            return root / relative
    tried = ", ".join(str(r) for r in roots)
    raise ServiceStartError(
        f"{what} not found under {tried}: gcloud components install {component} (or the "
        f"Debian package {package}), or set {SDK_ROOT_VARIABLE} to the SDK's root"
    )


def pubsub_launcher() -> Path:
    """The Pub/Sub emulator's launcher script."""
    return find_component(
        PUBSUB_LAUNCHER,
        what="Pub/Sub emulator",
        component="pubsub-emulator",
        package="google-cloud-cli-pubsub-emulator",
    )


def firestore_jar() -> Path:
    """The Firestore emulator's jar."""
    return find_component(
        FIRESTORE_JAR,
        what="Firestore emulator",
        component="cloud-firestore-emulator",
        package="google-cloud-cli-firestore-emulator",
    )
