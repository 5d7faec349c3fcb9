"""The bundles `make build` writes deploy as uploaded: each one alone, in a fresh venv.

Cloud Build turns a function's or the relay's folder into an image by running
``pip install -r requirements.txt`` and nothing else, then loads ``main``. So for each bundle:
build into a temp dir with scripts/build-bundles, create a venv without system site packages,
install that bundle's requirements.txt, and in a subprocess with cwd = the bundle (and no
PYTHONPATH, no user site) load the entry point as the platform does: functions-framework's
``create_app`` for the functions, gunicorn's loader for the relay - then build every client for
the Firestore and Redis backends (see bundle_probe.py). The relay is also started with app.yaml's
own entrypoint command and answers /healthz. A package missing from a requirements.txt, a pin
that does not install, or a library module that needs a dev-only dependency fails here.

Runs in `make test`: the three venvs are created in parallel (~30-60 s on 2 CPUs with pip's
cache or the local index) - well under the 2 minutes that would send it to the slow marker.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pubsub_toolkit_local.processes import free_port
from tests.conftest import repo_root
from tests.deploy.sdk import load_app_yaml, sdk_root
from tests.support.waiting import wait_until

ROOT = repo_root()
PROBE = Path(__file__).with_name("bundle_probe.py")
FUNCTIONS = ("ingress", "consumer")  # bundle name == entry point the deploy uses
BUNDLES = {**{f"functions/{name}": name for name in FUNCTIONS}, "appengine/relay": "relay"}
FUNCTION_RUNTIME = "python312"  # terraform's var.function_runtime and deploy-gcloud's default


def runtime_python(runtime: str) -> Path:
    """An interpreter of the deploy runtime's version (python312 -> 3.12) when the machine has one.

    The Cloud SDK bundles a CPython 3.12, so this machine always does; elsewhere fall back to the
    test's own interpreter with a warning rather than test nothing.
    """
    version = f"{runtime[6]}.{runtime[7:]}"  # python312 -> 3.12
    for candidate in (
        shutil.which(f"python{version}"),
        str(sdk_root() / "platform/bundledpythonunix/bin/python3"),
    ):
        if candidate and Path(candidate).exists():
            out = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.stdout.strip() == version:
                return Path(candidate)
    warnings.warn(
        f"no Python {version} here: bundle venvs use {sys.version.split()[0]}", stacklevel=1
    )
    return Path(sys.executable)


def make_venv(python: Path, venv: Path, requirements: Path) -> tuple[Path, float]:
    """python -m venv + pip install -r, as the buildpack does; returns the venv's python."""
    started = time.monotonic()
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, capture_output=True)
    pip = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", "-r", str(requirements)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    errors = [line for line in pip.stderr.splitlines() if "is ignored" not in line]
    assert pip.returncode == 0, f"pip install -r {requirements} failed:\n" + "\n".join(errors)
    return venv / "bin/python", time.monotonic() - started


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment: nothing that could point Python or Google clients elsewhere."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    return env | extra


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "build"
    subprocess.run([str(ROOT / "scripts/build-bundles"), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def relay_app(build_dir: Path) -> dict[str, object]:
    """The built app.yaml, validated and converted by the Cloud SDK (see test_app_yaml.py)."""
    return load_app_yaml(build_dir / "appengine/relay/app.yaml")


@pytest.fixture(scope="module")
def venvs(
    build_dir: Path, relay_app: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """One fresh venv per bundle, created in parallel (pip is mostly waiting on I/O)."""
    root = tmp_path_factory.mktemp("venvs")
    runtimes = {b: FUNCTION_RUNTIME for b in BUNDLES} | {
        "appengine/relay": str(relay_app["runtime"])
    }
    with ThreadPoolExecutor(max_workers=len(BUNDLES)) as pool:
        futures = {
            bundle: pool.submit(
                make_venv,
                runtime_python(runtimes[bundle]),
                root / bundle.replace("/", "-"),
                build_dir / bundle / "requirements.txt",
            )
            for bundle in BUNDLES
        }
        results = {bundle: future.result() for bundle, future in futures.items()}
    for bundle, (_, seconds) in results.items():
        print(f"venv for {bundle}: {seconds:.0f}s")
    return {bundle: python for bundle, (python, _) in results.items()}


def oidc_token() -> dict[str, str]:
    """A token signed like Cloud Tasks' and the certificate to check it (for the relay probe)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID
    from google.auth import crypt, jwt

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "probe")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    signer = crypt.RSASigner.from_string(pem, key_id="probe")
    token = jwt.encode(
        signer,
        {
            "iss": "https://accounts.google.com",
            "aud": "https://bundle-probe.ew.r.appspot.com",
            "email": "ptk-tasks-invoker@bundle-probe.iam.gserviceaccount.com",
            "email_verified": True,
            "iat": int(now.timestamp()),
            "exp": int(now.timestamp()) + 600,
        },
    )
    return {
        "PROBE_OIDC_TOKEN": token.decode(),
        "PROBE_OIDC_CERT": cert.public_bytes(serialization.Encoding.PEM).decode(),
    }


def gunicorn_target(entrypoint: str) -> str:
    """The app spec gunicorn loads, from app.yaml's entrypoint (its last argument)."""
    words = shlex.split(entrypoint)
    assert words[0] == "gunicorn", f"relay entrypoint is not gunicorn: {entrypoint}"
    return words[-1]


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_bundle_loads_in_its_own_venv(
    bundle: str, build_dir: Path, venvs: dict[str, Path], relay_app: dict[str, object]
) -> None:
    source = build_dir / bundle
    if bundle.startswith("functions/"):
        args, extra = ["function", BUNDLES[bundle]], {}
    else:
        entrypoint = relay_app["version"]["entrypoint"]["shell"]  # type: ignore[index]
        args, extra = ["relay", gunicorn_target(entrypoint)], oidc_token()
    run = subprocess.run(
        [str(venvs[bundle]), "-E", "-s", "-c", PROBE.read_text(), *args],
        cwd=source,
        env=clean_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, f"{bundle} does not load as deployed:\n{run.stderr[-3000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])
    # The probe really walked the library copied into the bundle.
    assert "pubsub_toolkit.ingress.pipeline" in report["modules"]
    if bundle == "appengine/relay":
        assert report["cloud_run_app"] == "cloud_run:create_app()"
    assert "pubsub_toolkit.stores.dedup.redis" in report["modules"]


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_bundle_carries_no_local_stack_and_no_operator_tools(bundle: str, build_dir: Path) -> None:
    """The local stack and the Cloud Tasks emulator are a development tool: never uploaded."""
    files = [p.relative_to(build_dir / bundle).as_posix() for p in (build_dir / bundle).rglob("*")]
    assert files, f"{bundle} is empty"
    local = [f for f in files if "pubsub_toolkit_local" in f or "tasks_emulator" in f]
    assert not local, f"{bundle} carries the local stack: {local[:5]}"
    assert not (build_dir / bundle / "pubsub_toolkit/local").exists()
    # Nor the operator's tools and the emulator workarounds (pubsub-toolkit-cli, in cli/): no
    # entry point imports them.
    assert not [f for f in files if "pubsub_toolkit_cli" in f]
    for tool in ("operations", "consumer/unary_pull.py", "emulator.py"):
        assert not (build_dir / bundle / "pubsub_toolkit" / tool).exists(), tool


def test_a_handler_package_and_its_files_are_bundled(tmp_path: Path) -> None:
    """What a user puts beside functions/consumer/main.py is uploaded with it: a handler that is
    a package (PUBSUB_TOOLKIT_HANDLER=billing.handlers:handle) and the files it reads. Found on a
    trial deploy: the build copied only the top-level *.py files, so such a handler was missing
    from the bundle and the deployed consumer refused every message ("No module named
    'billing'"). Built from a copy of the tree, so the repository stays as it is."""
    tree = tmp_path / "tree"
    for folder in ("scripts", "functions", "appengine", "shared/pubsub_toolkit"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    package = tree / "functions/consumer/billing"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text("def handle(message):\n    return 'ok'\n")
    (package / "rates.json").write_text("{}")
    (tree / "functions/consumer/.pytest_cache").mkdir()  # a local run's cache: never uploaded
    out = tmp_path / "build"
    subprocess.run([str(tree / "scripts/build-bundles"), str(out)], check=True, capture_output=True)
    consumer = out / "functions/consumer"
    for name in ("billing/__init__.py", "billing/handlers.py", "billing/rates.json"):
        assert (consumer / name).is_file(), f"{name} is not in the consumer's bundle"
    # The relay's Dockerfile stays out of the App Engine bundle: the deploy scripts add it for
    # Cloud Run only.
    assert not (out / "appengine/relay/Dockerfile").exists()
    assert not list(out.rglob("__pycache__")) and not list(out.rglob(".pytest_cache"))


@pytest.fixture
def relay_server(
    build_dir: Path, venvs: dict[str, Path], relay_app: dict[str, object]
) -> Iterator[str]:
    """The relay started with app.yaml's entrypoint and env_variables, as App Engine does."""
    version = relay_app["version"]
    port = free_port()
    venv_bin = venvs["appengine/relay"].parent
    env = clean_env(
        PORT=str(port),
        # App Engine puts the installed packages' scripts on PATH and sets the project.
        PATH=f"{venv_bin}:/usr/bin:/bin",
        GOOGLE_CLOUD_PROJECT="bundle-probe",
        PUBSUB_EMULATOR_HOST="127.0.0.1:9",
        FIRESTORE_EMULATOR_HOST="127.0.0.1:9",
        CLOUD_TASKS_EMULATOR_HOST="127.0.0.1:9",
        **version.get("envVariables", {}),  # type: ignore[union-attr]
    )
    proc = subprocess.Popen(
        ["/bin/sh", "-c", version["entrypoint"]["shell"]],  # type: ignore[index]
        cwd=build_dir / "appengine/relay",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


def test_relay_serves_with_app_yaml_entrypoint(relay_server: str) -> None:
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{relay_server}/healthz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    wait_until(healthy, timeout=60, what="the relay's /healthz under gunicorn")


# ---------------------------------------------------------------------------------------------
# requirements.txt pins agree with pyproject.toml
# ---------------------------------------------------------------------------------------------


def requirement_lines(path: Path) -> list[Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [Requirement(line) for line in lines if line]


def pyproject_requirements() -> dict[str, Requirement]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = config["project"]
    declared = list(project["dependencies"])
    for deps in project["optional-dependencies"].values():
        declared += deps
    # The dev tools never ship; gunicorn is checked against the dev group's range too.
    dev = config["dependency-groups"]["dev"]
    declared += [d for d in dev if isinstance(d, str) and d.startswith("gunicorn")]
    return {canonicalize_name(Requirement(d).name): Requirement(d) for d in declared}


def test_requirements_are_pinned_within_pyproject_ranges() -> None:
    declared = pyproject_requirements()
    pins: dict[str, dict[str, str]] = {}
    problems = []
    for bundle in BUNDLES:
        for req in requirement_lines(ROOT / bundle / "requirements.txt"):
            name = canonicalize_name(req.name)
            specs = list(req.specifier)
            if len(specs) != 1 or specs[0].operator != "==":
                problems.append(f"{bundle}: {req} is not pinned with ==")
                continue
            version = specs[0].version
            pins.setdefault(name, {})[bundle] = version
            if name in declared and not declared[name].specifier.contains(version):
                problems.append(f"{bundle}: {req} is outside pyproject's {declared[name]}")
            if name in declared and not set(declared[name].extras) <= set(req.extras):
                problems.append(f"{bundle}: {req} lacks pyproject's extras {declared[name]}")
    for name, by_bundle in pins.items():
        if len(set(by_bundle.values())) > 1:
            problems.append(f"{name} is pinned differently across bundles: {by_bundle}")
    assert not problems, "\n".join(problems)
