"""Issue 25, the deploy's second review against Google's documentation, checked offline.

The deploy scripts by dry-run (as test_deploy_scripts.py does), `make deploy` with only terraform,
gcloud and bash on PATH, the deploy root's import blocks read with python-hcl2, and the
deployer-roles table of docs/how-to/deploy.md against the resource types the module creates. The
Terraform module's own fixes are proven by tests/terraform (terraform test and structure checks,
each failing on a copy without its fix).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest

from tests.deploy.test_deploy_cloud_run import terraform_dry_run
from tests.deploy.test_deploy_gcloud_push import BASE, DryRun, dry_run
from tests.deploy.test_deploy_scripts import (
    ROOT,
    assert_gcloud_parses,
    backend_config,
    commands,
    flag,
    gcloud,
    raw_commands,
    run_script,
)
from tests.terraform import iac, structure

BUILD = "serviceAccount:ptk-build@fake-proj.iam.gserviceaccount.com"
GCF_SOURCES = "projects/_/buckets/gcf-v2-sources-<project-number>-europe-west1"


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(
        tmp_path_factory.mktemp("round-two"),
        **BASE,
        CONSUMER_ID="billing",
        HANDLER="example_handler:handle",
    )


# --- 1. the build account reads gcf-v2-sources, and its grants settle before the builds ------


def test_build_account_reads_the_functions_own_source_bucket_before_any_build(
    full: DryRun,
) -> None:
    (grant,) = [
        c
        for c in gcloud(full.cmds, "projects", "add-iam-policy-binding")
        if flag(c, "member") == BUILD and flag(c, "role") == "roles/storage.objectViewer"
    ]
    condition = flag(grant, "condition") or ""
    assert f'resource.name == "{GCF_SOURCES}"' in condition
    assert f'resource.name.startsWith("{GCF_SOURCES}/")' in condition
    assert "," not in condition.split("expression=", 1)[1]  # gcloud splits --condition on commas
    first_build = full.one("functions", "deploy", arg="ingress")
    assert full.cmds.index(grant) < first_build


def test_the_build_grants_propagate_before_the_first_build(full: DryRun) -> None:
    """Terraform waits 60 s (time_sleep.build_iam) after the build identity's grants: so does
    the script, after the last of them and before the first build."""
    build_grants = [
        i
        for i, c in enumerate(full.cmds)
        if "add-iam-policy-binding" in c[:5] and flag(c, "member") == BUILD
    ]
    first_build = full.one("functions", "deploy", arg="ingress")
    sleeps = [i for i, c in enumerate(full.cmds) if c[0] == "sleep"]
    assert [int(full.cmds[i][1]) for i in sleeps] == [60]
    assert max(build_grants) < sleeps[0] < first_build
    # The relay's own build identity (App Engine builds as the relay) is granted before it too.
    relay_grants = [
        i
        for i, c in enumerate(full.cmds)
        if c[:3] == ["gcloud", "projects", "add-iam-policy-binding"]
        and flag(c, "member") == "serviceAccount:ptk-relay@fake-proj.iam.gserviceaccount.com"
        and flag(c, "role") == "roles/logging.logWriter"
    ]
    assert relay_grants and max(relay_grants) < sleeps[0] < full.one("app", "deploy")


def test_the_conditional_grant_parses_with_the_installed_sdk(full: DryRun, tmp_path: Path) -> None:
    grants = [c for c in full.cmds if flag(c, "condition") not in (None, "None")]
    assert len(grants) == 1
    assert_gcloud_parses(grants, tmp_path)


# --- 11. the per-minute stats expire on the gcloud path too ----------------------------------


def test_per_minute_stats_get_a_ttl_like_the_module_s(full: DryRun) -> None:
    ttls = {
        flag(c, "collection-group")
        for c in gcloud(full.cmds, "firestore", "fields", "ttls", "update")
    }
    module = "\n".join(p.read_text() for p in (ROOT / "terraform").glob("*.tf"))
    block = re.search(r"ttl_collection_groups = [^\n]*merge\(\s*\{(.*?)\n\s*\},", module, re.S)
    assert block
    # The module's groups are the library's names behind PUBSUB_TOOLKIT_STORE_PREFIX ("" here).
    expected = set(re.findall(r'= "\$\{local\.store_prefix\}(pubsub_toolkit_\w+)"', block.group(1)))
    assert "pubsub_toolkit_stats_minutes" in expected
    assert ttls == expected | {"pubsub_toolkit_dedup"}
    indexes = {
        flag(c, "collection-group")
        for c in gcloud(full.cmds, "firestore", "indexes", "fields", "update")
    }
    assert indexes == ttls


# --- 12. a prefixed App Engine deployment is pointed at `default` first ----------------------


def test_prefix_with_app_engine_suggests_default_for_a_fresh_application() -> None:
    result = run_script("scripts/deploy-gcloud", "--dry-run", **BASE, NAME_PREFIX="blue-")
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    suggested = re.findall(r"APP_ENGINE_SERVICE=([\w-]+)", line)
    # The first suggestion is the one a fresh application accepts: its first service is default.
    assert suggested and suggested[0] == "default", line
    assert "first service must be default" in line


# --- DEDUP_TTL below the redelivery window is refused, as by the module ----------------------


@pytest.mark.parametrize("ttl", ["3600", "604800", "8d", "-1"])
def test_dedup_ttl_within_pubsub_s_redelivery_window_is_refused(ttl: str) -> None:
    result = run_script("scripts/deploy-gcloud", "--dry-run", **BASE, DEDUP_TTL_SECONDS=ttl)
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert f"DEDUP_TTL_SECONDS={ttl}" in line and "604800" in line


def test_dedup_ttl_above_the_window_is_deployed(tmp_path: Path) -> None:
    run = dry_run(tmp_path, **BASE, DEDUP_TTL_SECONDS="604801")
    assert run.env_files()["ingress"]["PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS"] == "604801"


# --- 3. make deploy needs terraform, gcloud and bash, not the development toolchain ----------

# What a deployer's machine has besides terraform, gcloud and bash: make and coreutils.
BASE_TOOLS = ["make", "bash", "sh", "env", "dirname", "basename", "rm", "mkdir", "cp", "find"]
BASE_TOOLS += ["sort", "sed", "tail", "cat", "xargs", "sha256sum", "cut", "grep", "head", "tr"]
DEV_TOOLS = ("java", "npm", "node", "python3", "python", "redis-server", "checkov", "pip")


def test_make_deploy_reaches_terraform_with_only_terraform_gcloud_and_bash(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in (*BASE_TOOLS, "terraform", "gcloud"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run this test"
        (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "DRY_RUN": "1"}
    for tool in DEV_TOOLS:
        assert shutil.which(tool, path=env["PATH"]) is None
    tfvars = tmp_path / "my.tfvars"
    shutil.copy(ROOT / "deploy/terraform.tfvars.example", tfvars)
    result = subprocess.run(
        [
            str(bin_dir / "make"),
            "-C",
            str(ROOT),
            "deploy",
            f"TFVARS={tfvars}",
            "VENV=/nonexistent/venv",
        ],
        env=env
        | {
            "TF_BACKEND_CONFIG": str(backend_config(tmp_path)),
            "BUILD_DIR": str(tmp_path / "build"),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    tf = [c for c in commands(result.stdout) if c[0] == "terraform"]
    assert [c[2] for c in tf] == ["init", "apply"], result.stdout
    assert not (ROOT / "deploy/terraform/.terraform").exists()


def test_make_help_describes_the_deploy_as_it_is() -> None:
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True, check=True
    )
    (line,) = [row for row in result.stdout.splitlines() if row.startswith("deploy ")]
    assert "Eventarc" not in line and "terraform, gcloud and bash" in line


# --- 9. the Cloud Run relay's image is built by the deployment's build account ---------------


def test_relay_image_is_built_as_the_build_account_with_a_regional_logs_bucket(
    tmp_path: Path,
) -> None:
    code, out, err = terraform_dry_run(
        tmp_path, 'relay_platform = "cloud_run"\nname_prefix = "blue-"\n'
    )
    assert code == 0, err
    cmds = commands(out)
    (submit,) = gcloud(cmds, "builds", "submit")
    account = (
        "projects/my-project/serviceAccounts/ptk-blue-build@my-project.iam.gserviceaccount.com"
    )
    assert flag(submit, "service-account") == account
    builds = "gs://my-project-blue-pubsub-toolkit-builds"
    assert flag(submit, "gcs-log-dir") == f"{builds}/logs"
    assert flag(submit, "gcs-source-staging-dir") == f"{builds}/source"
    assert flag(submit, "region") == "europe-west1"
    # The account, its grants and the bucket exist (and the grants have settled) before the
    # build: a targeted apply of the wait that follows them all, then the full apply.
    tf = [c for c in cmds if c[0] == "terraform"]
    assert [c[2] for c in tf] == ["init", "apply", "apply"]
    assert "-target=module.pubsub_toolkit.time_sleep.build_iam" in tf[1]
    assert not any(a.startswith("-target") for a in tf[2])
    assert cmds.index(tf[1]) < cmds.index(submit) < cmds.index(tf[2])
    # The names are the module's: the build account and the builds bucket it grants.
    module = "\n".join(p.read_text() for p in (ROOT / "terraform").glob("*.tf"))
    assert '"${var.project_id}-${local.prefix}pubsub-toolkit-builds"' in module
    assert 'sa_prefix = coalesce(var.service_account_prefix, "ptk-${var.name_prefix}")' in module
    assert_gcloud_parses([submit], tmp_path)


# --- 10. a second deploy after a destroy adopts what the first one left behind ---------------


def import_blocks() -> dict[str, dict[str, str]]:
    with (ROOT / "deploy/terraform/imports.tf").open() as f:
        blocks = hcl2.load(f)["import"]
    return {
        str(b["to"]).strip("${}"): {k: str(v) for k, v in b.items() if not k.startswith("__")}
        for b in blocks
    }


def test_deploy_root_imports_what_destroy_leaves_behind() -> None:
    blocks = import_blocks()
    assert set(blocks) == {
        "module.pubsub_toolkit.google_app_engine_application.app[0]",
        "module.pubsub_toolkit.google_firestore_database.this[0]",
        "module.pubsub_toolkit.google_cloud_tasks_queue.delay[0]",
    }
    for address, block in blocks.items():
        # Each target is a resource the module really declares (type and name).
        rtype, name = address.split(".")[2:4]
        assert structure._resource(ROOT / "terraform", rtype, name.split("[")[0]), address
        assert "_exists" in block["for_each"], (address, block)
    queue = blocks["module.pubsub_toolkit.google_cloud_tasks_queue.delay[0]"]["for_each"]
    assert "/queues/${var.name_prefix}pubsub-toolkit-delay" in queue
    with (ROOT / "deploy/terraform/variables.tf").open() as f:
        variables = {k.strip('"') for d in hcl2.load(f)["variable"] for k in d}
    assert {
        "app_engine_application_exists",
        "firestore_database_exists",
        "tasks_queue_exists",
    } <= variables


def test_deploy_root_with_its_import_blocks_validates(tmp_path: Path) -> None:
    """terraform validate of deploy/terraform (providers offline when unreachable, as in
    tests/terraform): an import block whose target the module does not declare is an error."""
    root = ROOT / "deploy/terraform"
    tf = iac.terraform_setup(tmp_path / "setup", [iac.TERRAFORM_DIR, root])
    data = tmp_path / "data"
    prepared = tf.prepare(root, data)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    validated = tf.run(["validate", "-no-color"], root, data)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert not (root / ".terraform").exists()


def test_deploy_root_terraform_test(tmp_path: Path) -> None:
    """deploy/terraform/tests/deploy_root.tftest.hcl with mocked providers (offline when the
    registry is unreachable, as in tests/terraform): a tfvars file's settings reach the module
    (relay.service, ingress.extra_env, tasks_retry), and a prefixed deployment on the App Engine
    relay must name its service, as the gcloud script asks for APP_ENGINE_SERVICE - on `default`
    it would take the relay of the project's first deployment."""
    root = ROOT / "deploy/terraform"
    tf = iac.terraform_setup(tmp_path / "setup", [iac.TERRAFORM_DIR, root])
    data = tmp_path / "data"
    prepared = tf.prepare(root, data)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    tested = tf.run(["test", "-no-color"], root, data)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "4 passed, 0 failed" in tested.stdout, tested.stdout
    assert not (root / ".terraform").exists()


def test_apply_looks_up_what_exists_before_applying(tmp_path: Path) -> None:
    code, out, err = terraform_dry_run(tmp_path, 'name_prefix = "blue-"\n')
    assert code == 0, err
    cmds = raw_commands(out)
    apply = next(i for i, c in enumerate(cmds) if c[:1] == ["terraform"] and c[2] == "apply")
    probes = [c for c in cmds[:apply] if c[0] == "gcloud"]
    assert [c[1:3] for c in probes] == [
        ["app", "describe"],
        ["firestore", "databases"],
        ["tasks", "queues"],
    ]
    assert all("describe" in c for c in probes)  # read-only
    assert probes[2][4] == "blue-pubsub-toolkit-delay"
    assert_gcloud_parses(probes, tmp_path)


def test_destroy_keeps_the_queue_for_the_next_apply(tmp_path: Path) -> None:
    tfvars = tmp_path / "my.tfvars"
    shutil.copy(ROOT / "deploy/terraform.tfvars.example", tfvars)
    result = run_script(
        "scripts/deploy-terraform",
        "--destroy",
        "--dry-run",
        TFVARS=str(tfvars),
        BUILD_DIR=str(tmp_path / "build"),
        TF_BACKEND_CONFIG=str(backend_config(tmp_path)),
    )
    assert result.returncode == 0, result.stderr
    tf = [c[2:] for c in commands(result.stdout) if c[0] == "terraform"]
    assert [c[0] for c in tf] == ["init", "state", "destroy"]
    assert tf[1] == ["state", "rm", "module.pubsub_toolkit.google_cloud_tasks_queue.delay[0]"]
    assert f"-var-file={tfvars}" in tf[2]


# --- 8. the deployer-roles table covers every resource type the module creates ---------------

# Resource type -> the role (in docs/how-to/deploy.md's table) that lets the deployer manage it.
DEPLOYER_ROLES = {
    "google_project_service": "roles/serviceusage.serviceUsageAdmin",
    "google_project_service_identity": "roles/serviceusage.serviceUsageAdmin",
    "google_service_account": "roles/iam.serviceAccountAdmin",
    "google_service_account_iam_member": "roles/iam.serviceAccountAdmin",
    "google_project_iam_member": "roles/resourcemanager.projectIamAdmin",
    "google_pubsub_topic": "roles/pubsub.admin",
    "google_pubsub_topic_iam_member": "roles/pubsub.admin",
    "google_pubsub_subscription": "roles/pubsub.admin",
    "google_pubsub_subscription_iam_member": "roles/pubsub.admin",
    "google_cloudfunctions2_function": "roles/cloudfunctions.developer",
    "google_cloud_run_v2_service": "roles/run.admin",
    "google_cloud_run_v2_service_iam_member": "roles/run.admin",
    "google_cloud_scheduler_job": "roles/cloudscheduler.admin",
    "google_secret_manager_secret_iam_member": "roles/secretmanager.admin",
    "google_cloud_tasks_queue": "roles/cloudtasks.admin",
    "google_cloud_tasks_queue_iam_member": "roles/cloudtasks.admin",
    "google_app_engine_application": "roles/appengine.appCreator",
    "google_app_engine_standard_app_version": "roles/appengine.appAdmin",
    "google_app_engine_service_split_traffic": "roles/appengine.appAdmin",
    "google_storage_bucket": "roles/storage.admin",
    "google_storage_bucket_iam_member": "roles/storage.admin",
    "google_storage_bucket_object": "roles/storage.admin",
    "google_firestore_database": "roles/datastore.owner",
    "google_firestore_field": "roles/datastore.indexAdmin",
    "google_logging_metric": "roles/logging.configWriter",
    "google_monitoring_alert_policy": "roles/monitoring.alertPolicyEditor",
    "google_monitoring_dashboard": "roles/monitoring.dashboardEditor",
    "google_monitoring_notification_channel": "roles/monitoring.notificationChannelEditor",
}


def deployer_table() -> dict[str, str]:
    """Role -> its "why" cell, from the "Roles the deployer needs" table."""
    text = (ROOT / "docs/how-to/deploy.md").read_text()
    section = text.split("## Roles the deployer needs", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2:
            for role in re.findall(r"`(roles/[\w.]+)`", cells[0]):
                rows[role] = cells[1]
    return rows


def test_every_resource_type_has_a_deployer_role_in_the_table() -> None:
    used = {
        rtype
        for kind in ("resource",)
        for _, rtype, _, _ in structure._resources(ROOT / "terraform", kind)
        if rtype.startswith("google_")
    }
    assert used - set(DEPLOYER_ROLES) == set(), "a new resource type: name its deployer role"
    table = deployer_table()
    missing = {DEPLOYER_ROLES[t] for t in used} - set(table)
    assert missing == set(), f"docs/how-to/deploy.md's deployer roles lack {missing}"


def test_service_usage_is_needed_even_without_enabling_apis() -> None:
    # google_project_service_identity calls Service Usage whatever enable_apis says.
    why = deployer_table()["roles/serviceusage.serviceUsageAdmin"]
    assert "enable_apis = false" in why and "service identit" in why.lower()
    assert "skip with" not in why


def test_readme_and_how_to_say_what_a_second_deploy_needs() -> None:
    for doc in ("README.md", "docs/how-to/deploy.md"):
        text = (ROOT / doc).read_text()
        assert "second deploy" in text.lower() and "--destroy" in text, doc
    assert os.path.exists(ROOT / "deploy/terraform/imports.tf")
