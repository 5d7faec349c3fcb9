"""The Google Cloud SDK's offline pieces the deploy tests use: its Python and its app.yaml checks.

The SDK is a requirement of the test machines (the Pub/Sub and Firestore emulators come from
it), so its absence is a failure with the fix in the message, not a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def sdk_root() -> Path:
    """The SDK's install directory: CLOUDSDK_ROOT_DIR, else where `gcloud` lives, else /usr/lib."""
    candidates = [os.environ.get("CLOUDSDK_ROOT_DIR", ""), "/usr/lib/google-cloud-sdk"]
    gcloud = shutil.which("gcloud")
    if gcloud:
        # /usr/bin/gcloud is a symlink into SDK/bin/gcloud.
        candidates.insert(1, str(Path(gcloud).resolve().parent.parent))
    for candidate in filter(None, candidates):
        if (Path(candidate) / "lib/googlecloudsdk").is_dir():
            return Path(candidate)
    raise AssertionError(
        "Google Cloud SDK not found (looked at CLOUDSDK_ROOT_DIR, gcloud on PATH, "
        "/usr/lib/google-cloud-sdk): install google-cloud-cli (apt), which also provides "
        "the emulators the other tests use"
    )


def sdk_python() -> Path:
    """The interpreter gcloud itself runs on: CLOUDSDK_PYTHON, else the SDK's bundled one."""
    override = os.environ.get("CLOUDSDK_PYTHON")
    if override:
        return Path(shutil.which(override) or override)
    bundled = sdk_root() / "platform/bundledpythonunix/bin/python3"
    if bundled.exists():
        return bundled
    found = shutil.which("python3")
    assert found, "no Python for the Cloud SDK: set CLOUDSDK_PYTHON"
    return Path(found)


def check_app_yaml(path: Path) -> subprocess.CompletedProcess[str]:
    """Run app_yaml_check.py on ``path`` under the SDK's Python; the caller judges the result."""
    root = sdk_root()
    with tempfile.TemporaryDirectory() as config:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": f"{root}/lib:{root}/lib/third_party",
            # Keep the SDK away from the user's gcloud configuration.
            "CLOUDSDK_CONFIG": config,
        }
        return subprocess.run(
            [str(sdk_python()), str(HERE / "app_yaml_check.py"), str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )


def load_app_yaml(path: Path) -> dict[str, Any]:
    """The validated app.yaml as the Admin API Version the deploy would send (fails if invalid)."""
    result = check_app_yaml(path)
    assert result.returncode == 0, f"{path} is rejected by the Cloud SDK: {result.stderr.strip()}"
    return json.loads(result.stdout)  # type: ignore[no-any-return]
