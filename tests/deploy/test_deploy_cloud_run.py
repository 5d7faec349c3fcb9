"""The deploy scripts' Cloud Run relay path, checked by dry-run as test_deploy_scripts.py does.

scripts/deploy-gcloud with RELAY_PLATFORM=cloud_run must create no App Engine application and deploy
the relay with `gcloud run deploy --source` (the bundle plus its Dockerfile) behind the IAM invoker
check, grant run.invoker to the Cloud Tasks invoker account only, and point the queue's OIDC
audience, ingress's PUBSUB_TOOLKIT_RELAY_URL and the relay's PUBSUB_TOOLKIT_RELAY_AUDIENCE at the
service's deterministic URL - in that order, with the Terraform module's settings.
scripts/deploy-terraform with relay_platform = "cloud_run" in the tfvars builds the relay's image
(tagged by the bundle's content) before terraform runs and passes it as relay_image. Every printed
gcloud command also goes through the installed SDK's parser.
"""

from __future__ import annotations

import filecmp
import re
import shutil
from pathlib import Path

import pytest

from pubsub_toolkit.config import Settings
from tests.deploy.test_deploy_scripts import (
    PRIMITIVE_ROLES,
    ROOT,
    assert_gcloud_parses,
    backend_config,
    commands,
    flag,
    gcloud,
    run_script,
    tf_apis,
    tf_roles,
)
from tests.terraform import iac, structure

URL = "https://pubsub-toolkit-relay-<project-number>.europe-west1.run.app"
INVOKER = "serviceAccount:ptk-tasks-invoker@fake-proj.iam.gserviceaccount.com"


def index(cmds: list[list[str]], *words: str) -> int:
    """Position of the (single) command starting with ``gcloud words...``."""
    (position,) = [i for i, c in enumerate(cmds) if c[: len(words) + 1] == ["gcloud", *words]]
    return position


def env_file(path: str | None) -> dict[str, str]:
    assert path, "no --env-vars-file"
    return dict(re.findall(r'^(\w+): "(.*)"$', Path(path).read_text(), re.M))


@pytest.fixture(scope="module")
def cloud_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[str]], Path]:
    build = tmp_path_factory.mktemp("deploy-cloud-run") / "build"
    result = run_script(
        "scripts/deploy-gcloud",
        "--dry-run",
        PROJECT_ID="fake-proj",
        REGION="europe-west1",
        RELAY_PLATFORM="cloud_run",
        BUILD_DIR=str(build),
    )
    assert result.returncode == 0, result.stderr
    assert "Dry run: nothing was changed" in result.stdout
    return commands(result.stdout), build


def test_no_app_engine_at_all(cloud_run: tuple) -> None:
    cmds, _ = cloud_run
    assert gcloud(cmds, "app") == []
    (enable,) = gcloud(cmds, "services", "enable")
    # The module's APIs, but App Engine's (Terraform enables it only for relay_platform
    # app_engine), Cloud Scheduler's (no consumer: no sweep job) and Secret Manager's (no Redis).
    assert {a for a in enable if a.endswith(".googleapis.com")} == tf_apis() - {
        "appengine.googleapis.com",
        "cloudscheduler.googleapis.com",
        "secretmanager.googleapis.com",
    }


def test_relay_deploy_flags_match_the_module(cloud_run: tuple) -> None:
    cmds, build = cloud_run
    (deploy,) = gcloud(cmds, "run", "deploy")
    assert deploy[3] == "pubsub-toolkit-relay"
    relay_dir = build / "appengine/relay"
    assert flag(deploy, "source") == str(relay_dir)
    # The source deploy builds with the Dockerfile (cloud_run:create_app()), not buildpacks.
    assert filecmp.cmp(relay_dir / "Dockerfile", ROOT / "appengine/relay/Dockerfile", shallow=False)
    assert (relay_dir / "cloud_run.py").is_file()
    assert "--no-allow-unauthenticated" in deploy and "--allow-unauthenticated" not in deploy
    assert not any(a.startswith("--no-invoker-iam-check") for a in deploy)
    assert flag(deploy, "ingress") == "internal"
    assert flag(deploy, "service-account") == "ptk-relay@fake-proj.iam.gserviceaccount.com"
    assert flag(deploy, "build-service-account") == (
        "projects/fake-proj/serviceAccounts/ptk-build@fake-proj.iam.gserviceaccount.com"
    )
    defaults = structure._optional_defaults(iac.TERRAFORM_DIR, "cloud_run_relay")
    assert defaults is not None
    assert {
        "min_instances": flag(deploy, "min-instances"),
        "max_instances": flag(deploy, "max-instances"),
        "concurrency": flag(deploy, "concurrency"),
        "timeout_seconds": flag(deploy, "timeout"),
        "cpu": flag(deploy, "cpu"),
        "memory": flag(deploy, "memory"),
    } == {k: defaults[k] for k in ("min_instances", "max_instances", "concurrency")} | {
        k: defaults[k] for k in ("timeout_seconds", "cpu", "memory")
    }


def test_one_url_is_audience_relay_url_and_the_relay_s_own_audience(cloud_run: tuple) -> None:
    cmds, _ = cloud_run
    (queue,) = gcloud(cmds, "tasks", "queues", "create")
    assert flag(queue, "http-oidc-token-audience-override") == URL
    assert flag(queue, "http-oidc-service-account-email-override") == INVOKER.split(":", 1)[1]
    (ingress,) = [c for c in gcloud(cmds, "functions", "deploy") if c[3] == "ingress"]
    assert env_file(flag(ingress, "env-vars-file"))["PUBSUB_TOOLKIT_RELAY_URL"] == URL
    (deploy,) = gcloud(cmds, "run", "deploy")
    relay_env = env_file(flag(deploy, "env-vars-file"))
    assert relay_env["PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM"] == "true"
    settings = Settings.from_env(relay_env)
    assert settings.delay is not None
    assert (settings.delay.audience, settings.delay.relay_url) == (URL, URL)
    assert settings.delay.relay_auth == "oidc"
    assert settings.delay.invoker_email == INVOKER.split(":", 1)[1]
    assert settings.project == "fake-proj"


def test_invoker_binding_follows_the_deploy_and_names_only_the_invoker(cloud_run: tuple) -> None:
    cmds, _ = cloud_run
    (binding,) = gcloud(cmds, "run", "services", "add-iam-policy-binding")
    assert binding[4] == "pubsub-toolkit-relay"
    assert (flag(binding, "member"), flag(binding, "role")) == (INVOKER, "roles/run.invoker")
    assert flag(binding, "region") == "europe-west1"
    # Order: the queue (with its audience), ingress, then the service, then who may invoke it.
    assert (
        index(cmds, "tasks", "queues", "create")
        < index(cmds, "run", "deploy")
        < index(cmds, "run", "services", "add-iam-policy-binding")
    )


def test_build_identity_reads_the_source_deploy_bucket_before_the_deploy(cloud_run: tuple) -> None:
    cmds, _ = cloud_run
    bucket = "gs://run-sources-fake-proj-europe-west1"  # the name gcloud run deploy --source uses
    (create,) = [c for c in gcloud(cmds, "storage", "buckets", "create") if c[4] == bucket]
    assert "--public-access-prevention" in create and "--uniform-bucket-level-access" in create
    (grant,) = [
        c for c in gcloud(cmds, "storage", "buckets", "add-iam-policy-binding") if c[4] == bucket
    ]
    assert flag(grant, "role") == "roles/storage.objectViewer"
    assert flag(grant, "member") == "serviceAccount:ptk-build@fake-proj.iam.gserviceaccount.com"
    assert cmds.index(create) < cmds.index(grant) < index(cmds, "run", "deploy")


def test_roles_are_the_module_s_and_none_is_primitive(cloud_run: tuple) -> None:
    cmds, _ = cloud_run
    granted = {flag(c, "role") for c in cmds if "add-iam-policy-binding" in c[:5]}
    assert "roles/run.invoker" in granted
    assert granted <= tf_roles() and not granted & PRIMITIVE_ROLES


def test_cloud_run_commands_parse_with_the_installed_sdk(cloud_run: tuple, tmp_path: Path) -> None:
    cmds, _ = cloud_run
    assert_gcloud_parses(cmds, tmp_path)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"RELAY_PLATFORM": "gke"}, "RELAY_PLATFORM=gke is not app_engine or cloud_run"),
        ({"RELAY_SERVICE": "Relay_1"}, "RELAY_SERVICE=Relay_1 is not lowercase"),
    ],
)
def test_bad_relay_setting_is_named_before_anything_runs(
    setting: dict[str, str], message: str
) -> None:
    env = {"PROJECT_ID": "fake-proj", "REGION": "europe-west1", "RELAY_PLATFORM": "cloud_run"}
    result = run_script("scripts/deploy-gcloud", "--dry-run", **(env | setting))
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert message in line


# --- deploy-terraform ------------------------------------------------------------------------


def terraform_dry_run(tmp_path: Path, extra_tfvars: str, **env: str) -> tuple[int, str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    tfvars = tmp_path / "my.tfvars"
    tfvars.write_text((ROOT / "deploy/terraform.tfvars.example").read_text() + extra_tfvars)
    result = run_script(
        "scripts/deploy-terraform",
        "--dry-run",
        TFVARS=str(tfvars),
        BUILD_DIR=str(tmp_path / "build"),
        TF_BACKEND_CONFIG=str(backend_config(tmp_path)),
        **env,
    )
    return result.returncode, result.stdout, result.stderr


def test_terraform_path_builds_the_image_then_applies_with_it(tmp_path: Path) -> None:
    code, out, err = terraform_dry_run(tmp_path / "a", 'relay_platform = "cloud_run"\n')
    assert code == 0, err
    cmds = commands(out)
    (submit,) = gcloud(cmds, "builds", "submit")
    relay_dir = tmp_path / "a/build/appengine/relay"
    assert submit[3] == str(relay_dir) and (relay_dir / "Dockerfile").is_file()
    image = flag(submit, "tag") or ""
    prefix = "europe-west1-docker.pkg.dev/my-project/cloud-run-source-deploy/pubsub-toolkit-relay:"
    assert image.startswith(prefix) and re.fullmatch(r"[0-9a-f]{12}", image[len(prefix) :])
    (repo,) = gcloud(cmds, "artifacts", "repositories", "create")
    assert repo[4] == "cloud-run-source-deploy" and flag(repo, "repository-format") == "docker"
    tf = [c for c in cmds if c[0] == "terraform"]
    # init, the build account first (test_deploy_round_two.py), then everything with the image.
    assert [c[2] for c in tf] == ["init", "apply", "apply"]
    assert f"-var=relay_image={image}" in tf[2]
    assert index(cmds, "builds", "submit") < cmds.index(tf[2])
    # Content-addressed: the same bundle built elsewhere gets the same tag (no new revision).
    _, again, _ = terraform_dry_run(tmp_path / "b", 'relay_platform = "cloud_run"\n')
    (resubmit,) = gcloud(commands(again), "builds", "submit")
    assert flag(resubmit, "tag") == image
    assert_gcloud_parses(cmds, tmp_path)


def test_terraform_path_uses_a_given_image_without_building(tmp_path: Path) -> None:
    image = "europe-west1-docker.pkg.dev/my-project/ci/relay:v7"
    code, out, err = terraform_dry_run(
        tmp_path, 'relay_platform = "cloud_run"\n', RELAY_IMAGE=image
    )
    assert code == 0, err
    cmds = commands(out)
    assert gcloud(cmds, "builds", "submit") == []
    (apply,) = [c for c in cmds if c[0] == "terraform" and c[2] == "apply"]
    assert f"-var=relay_image={image}" in apply


def test_terraform_path_on_app_engine_builds_no_image(tmp_path: Path) -> None:
    code, out, err = terraform_dry_run(tmp_path, "")
    assert code == 0, err
    cmds = commands(out)
    assert gcloud(cmds, "builds", "submit") == []
    assert not any(a.startswith("-var=relay_image") for c in cmds for a in c)


def test_terraform_path_refuses_an_unknown_platform(tmp_path: Path) -> None:
    code, out, err = terraform_dry_run(tmp_path, 'relay_platform = "gke"\n')
    assert code != 0 and not [c for c in commands(out) if c[0] == "terraform"]
    assert 'relay_platform = "gke"' in err and "not app_engine or cloud_run" in err


def test_deploy_root_example_mentions_the_platform_settings() -> None:
    example = (ROOT / "deploy/terraform.tfvars.example").read_text()
    assert re.search(r"^#\s*relay_platform\s*=", example, re.M)
    assert re.search(r"^#\s*cloud_run_relay\s*=", example, re.M)
    assert shutil.which("terraform"), "terraform is needed by the other deploy tests"
