"""Every offline Terraform check passes on terraform/ and fails on a copy broken for it.

A check that cannot fail proves nothing, so each one gets a copy of terraform/ (with its
examples/, tests/, policies/ and .trivyignore; the example calls the module by ``../..``, which
stays valid inside the copy) broken once in the way it exists to catch, and must fail naming
that breakage. The commands are iac.py's, the same ones scripts/tf-check runs. All runs happen
in one module-scoped fixture, two at a time, since `terraform test` alone takes minutes of CPU.
A `test` breakage keeps one run (~15-20 s of CPU each), so they are few: the values only a plan
shows (push OIDC, the token creator grant, the sweep job, Redis gating). Ordering (depends_on,
waits) is not a value; structure.py checks it, and checkov the policies, both cheaply.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.terraform import iac

# The fixture runs every check at once; under load (and beside `make test`'s other worker) it
# needs far more than the default 300 s: a bound against a hang, not a measurement.
pytestmark = pytest.mark.timeout(1800)

INGRESS_RUN = "ingress_is_pushed_from_origin"
WIRING = "tests/wiring.tftest.hcl"
CLOUD_RUN = "tests/cloud_run.tftest.hcl"
CLOUD_RUN_INVOKER_RUN = "tasks_reach_the_service_url_signed_for_it"
OPERATIONS = "tests/operations.tftest.hcl"
CONSUMER_RUN = "consumer_is_pushed_in_order_and_swept_with_a_name_prefix"
REDIS = "tests/redis.tftest.hcl"
REDIS_RUN = "redis_mode_has_no_firestore_resources"
# Issue 25's runs.
APP_ENGINE_TARGET_RUN = "app_engine_target_uses_routing_not_oidc"
DASHBOARD_RUN = "dashboard_charts_the_log_metrics_and_the_otel_metrics"


@dataclass(frozen=True)
class Breakage:
    check: str
    file: str  # relative to the module folder
    old: str  # must occur exactly once, so a drifted file fails here rather than test nothing
    new: str
    # Must appear in a finding (or, without findings, in the output); for `test` also in the
    # output, where the failed assertion's error_message names what broke.
    evidence: str
    # `terraform test` breakages: the one test file and run kept (the evidence names the run).
    run: tuple[str, str] = (WIRING, INGRESS_RUN)
    # Further (file, old, new) edits of the same breakage, when its fix spans files.
    also: tuple[tuple[str, str, str], ...] = ()


BREAKAGES = {
    "fmt_misindented": Breakage(
        "fmt",
        "versions.tf",
        '\n  required_version = ">= 1.9, < 2.0"',
        '\n      required_version = ">= 1.9, < 2.0"',
        "versions.tf",
    ),
    "validate_unknown_argument": Breakage(
        "validate",
        "functions.tf",
        '  public_access_prevention    = "enforced"\n',
        '  public_access_prevention    = "enforced"\n  not_an_argument = true\n',
        'An argument named "not_an_argument" is not expected here',
    ),
    "test_ingress_on_final_topic": Breakage(
        "test",
        "functions.tf",
        'entry_point   = "ingress"\n        trigger_topic = "origin"',
        'entry_point   = "ingress"\n        trigger_topic = "final"',
        INGRESS_RUN,
    ),
    "test_cloud_run_relay_invoked_by_its_own_account": Breakage(
        "test",
        "cloudrun.tf",
        '  member   = google_service_account.component["tasks-invoker"].member',
        '  member   = google_service_account.component["relay"].member',
        CLOUD_RUN_INVOKER_RUN,
        run=(CLOUD_RUN, CLOUD_RUN_INVOKER_RUN),
    ),
    "test_push_oidc_as_another_account": Breakage(
        "test",
        "push.tf",
        '      service_account_email = google_service_account.component["push"].email',
        '      service_account_email = google_service_account.component["ingress"].email',
        "with an OIDC token of the push account for that URL",
    ),
    "test_no_token_creator_for_old_projects": Breakage(
        "test",
        "push.tf",
        "  count = var.grant_token_creator_to_pubsub_agent ? 1 : 0\n",
        "  count = 0\n",
        "the Pub/Sub service agent needs token creator on the push account",
    ),
    "test_sweep_job_misses_sweep": Breakage(
        "test",
        "scheduler.tf",
        '    uri         = "${local.function_urls["consumer"]}/sweep"',
        '    uri         = local.function_urls["consumer"]',
        "the sweep job must POST to the consumer's /sweep",
        run=(OPERATIONS, CONSUMER_RUN),
    ),
    "test_final_sub_beside_the_consumer_function": Breakage(
        "test",
        "main.tf",
        "var.subscriptions : var.consumer != null ? {} : {",
        "var.subscriptions : {",
        "no final-sub fills for 7 days unread",
        run=(OPERATIONS, CONSUMER_RUN),
    ),
    "test_scheduler_invokes_as_another_account": Breakage(
        "test",
        "scheduler.tf",
        '  member   = google_service_account.component["scheduler"].member',
        '  member   = google_service_account.component["push"].member',
        "the scheduler account invokes the consumer's service only",
        run=(OPERATIONS, CONSUMER_RUN),
    ),
    "test_eventarc_api_enabled_again": Breakage(
        "test",
        "main.tf",
        '      "cloudresourcemanager.googleapis.com",\n',
        '      "cloudresourcemanager.googleapis.com",\n      "eventarc.googleapis.com",\n',
        "APIs: cloudresourcemanager and serviceusage on, Eventarc off",
        run=(WIRING, "oidc_audience_is_the_relay_url"),
    ),
    "test_ttl_fields_in_redis_mode": Breakage(
        "test",
        "main.tf",
        "  ttl_collection_groups = !local.firestore ? {} : merge(",
        "  ttl_collection_groups = merge(",
        "redis mode: no TTL fields",
        run=(REDIS, REDIS_RUN),
    ),
    "checkov_push_without_oidc": Breakage(
        "checkov",
        "push.tf",
        "    oidc_token {\n"
        '      service_account_email = google_service_account.component["push"].email\n'
        "      audience              = local.function_urls[each.key]\n"
        "    }\n",
        "",
        "CKV_PTK_6 module.pubsub_toolkit.google_pubsub_subscription.push",
    ),
    "checkov_push_without_dead_letter_policy": Breakage(
        "checkov",
        "push.tf",
        "  dead_letter_policy {\n"
        '    dead_letter_topic     = google_pubsub_topic.this["dead_letter"].id\n'
        "    max_delivery_attempts = var.push_max_delivery_attempts\n"
        "  }\n",
        "",
        "CKV_PTK_1 module.pubsub_toolkit.google_pubsub_subscription.push",
    ),
    "checkov_function_without_network_attachment": Breakage(
        "checkov",
        "functions.tf",
        "    vpc_connector                 = local.vpc_connector\n"
        "    vpc_connector_egress_settings = local.vpc_connector == null ? null :"
        ' "PRIVATE_RANGES_ONLY"\n'
        "    direct_vpc_egress             = local.direct_vpc == null ? null :"
        ' "VPC_EGRESS_PRIVATE_RANGES_ONLY"\n'
        '    dynamic "direct_vpc_network_interface" {\n'
        "      for_each = local.direct_vpc == null ? [] : [local.direct_vpc]\n"
        "      content {\n"
        "        network    = direct_vpc_network_interface.value.network\n"
        "        subnetwork = direct_vpc_network_interface.value.subnetwork\n"
        "        tags       = direct_vpc_network_interface.value.tags\n"
        "      }\n"
        "    }\n",
        "",
        "CKV_PTK_5 module.pubsub_toolkit.google_cloudfunctions2_function.this",
    ),
    "checkov_app_engine_relay_without_connector": Breakage(
        "checkov",
        "appengine.tf",
        '  dynamic "vpc_access_connector" {\n',
        '  dynamic "not_vpc_access_connector" {\n',
        "CKV_PTK_5 module.pubsub_toolkit.google_app_engine_standard_app_version.relay",
    ),
    "checkov_cloud_run_relay_without_vpc_access": Breakage(
        "checkov",
        "cloudrun.tf",
        '    dynamic "vpc_access" {\n',
        '    dynamic "not_vpc_access" {\n',
        "CKV_PTK_5 module.pubsub_toolkit.google_cloud_run_v2_service.relay",
    ),
    "checkov_no_dead_letter_policy": Breakage(
        "checkov",
        "pubsub.tf",
        "  dead_letter_policy {\n"
        '    dead_letter_topic     = google_pubsub_topic.this["dead_letter"].id\n'
        "    max_delivery_attempts = each.value.max_delivery_attempts\n"
        "  }\n",
        "",
        "CKV_PTK_1 module.pubsub_toolkit.google_pubsub_subscription.this",
    ),
    # The terminal subscription is exempt from CKV_PTK_1 only while it reads the dead-letter topic.
    "checkov_exempt_subscription_elsewhere": Breakage(
        "checkov",
        "pubsub.tf",
        '  name                       = "${local.prefix}${var.dead_letter_subscription}"\n'
        '  topic                      = google_pubsub_topic.this["dead_letter"].id\n',
        '  name                       = "${local.prefix}${var.dead_letter_subscription}"\n'
        '  topic                      = google_pubsub_topic.this["final"].id\n',
        "CKV_PTK_1 module.pubsub_toolkit.google_pubsub_subscription.dead_letter ",
    ),
    "checkov_editor_role": Breakage(
        "checkov",
        "iam.tf",
        'toset(["roles/logging.logWriter", "roles/artifactregistry.writer"])',
        'toset(["roles/logging.logWriter", "roles/artifactregistry.writer", "roles/editor"])',
        "CKV_PTK_2 module.pubsub_toolkit.google_project_iam_member.build",
    ),
    "checkov_no_oidc_token": Breakage(
        "checkov",
        "tasks.tf",
        "      oidc_token {\n"
        '        service_account_email = google_service_account.component["tasks-invoker"].email\n'
        "        audience              = local.relay_audience\n"
        "      }\n",
        "",
        "CKV_PTK_3 module.pubsub_toolkit.google_cloud_tasks_queue.delay",
    ),
    "checkov_cloud_run_relay_without_iam_check": Breakage(
        "checkov",
        "cloudrun.tf",
        "  invoker_iam_disabled = false\n",
        "  invoker_iam_disabled = true\n",
        "CKV_PTK_4 module.pubsub_toolkit.google_cloud_run_v2_service.relay",
    ),
    "checkov_cloud_run_relay_public_invoker": Breakage(
        "checkov",
        "cloudrun.tf",
        '  member   = google_service_account.component["tasks-invoker"].member',
        '  member   = "allUsers"',
        "CKV_PTK_4 module.pubsub_toolkit.google_cloud_run_v2_service_iam_member.tasks_invoker",
    ),
    "trivy_public_bucket": Breakage(
        "trivy",
        "iam.tf",
        '  role   = "roles/storage.objectViewer"\n'
        '  member = google_service_account.component["build"].member',
        '  role   = "roles/storage.objectViewer"\n  member = "allUsers"',
        "GCP-0001 iam.tf",
    ),
    "structure_no_description": Breakage(
        "structure",
        "variables.tf",
        '  description = "Project that holds the topics, Firestore, the queue, the functions and'
        ' the relay (App Engine or Cloud Run)."\n',
        "",
        "variables.tf: variable project_id has no description",
    ),
    "structure_function_builds_before_grants_propagate": Breakage(
        "structure",
        "functions.tf",
        "    google_project_service.this,\n    time_sleep.build_iam,\n",
        "    google_project_service.this,\n",
        "functions.tf: google_cloudfunctions2_function.this must depend_on time_sleep.build_iam",
    ),
    "structure_relay_build_grants_not_waited_for": Breakage(
        "structure",
        "identities.tf",
        '    { for role, m in google_project_iam_member.relay_build : "relay ${role}" => m.id },\n',
        "",
        "time_sleep.build_iam must be triggered by google_project_iam_member.relay_build",
    ),
    "structure_alerts_before_their_metrics": Breakage(
        "structure",
        "monitoring.tf",
        "  depends_on = [time_sleep.log_metrics]\n",
        "",
        "google_monitoring_alert_policy.log_metric must depend_on time_sleep.log_metrics",
    ),
    "structure_grant_to_agent_before_it_exists": Breakage(
        "structure",
        "pubsub.tf",
        "  member  = local.pubsub_service_agent\n\n"
        "  depends_on = [time_sleep.service_identities]\n",
        "  member  = local.pubsub_service_agent\n",
        "pubsub.tf: google_pubsub_topic_iam_member.service_agent_dead_letter_publisher must"
        " depend_on time_sleep.service_identities",
    ),
    "structure_app_engine_datastore_mode": Breakage(
        "structure",
        "appengine.tf",
        '  database_type = "CLOUD_FIRESTORE"\n',
        "",
        "google_app_engine_application.app needs database_type = CLOUD_FIRESTORE",
    ),
    "structure_app_engine_races_firestore": Breakage(
        "structure",
        "appengine.tf",
        "  depends_on = [google_project_service.this, google_firestore_database.this]\n",
        "  depends_on = [google_project_service.this]\n",
        "google_app_engine_application.app must depend_on google_firestore_database.this",
    ),
    "structure_bucket_without_prefix": Breakage(
        "structure",
        "functions.tf",
        '"${var.project_id}-${local.prefix}pubsub-toolkit-sources"',
        '"${var.project_id}-pubsub-toolkit-sources"',
        "google_storage_bucket.sources name does not carry local.prefix",
    ),
    "structure_alert_notifies_nobody": Breakage(
        "structure",
        "monitoring.tf",
        '  display_name          = "${local.alert_prefix}: dead-letter backlog"\n'
        '  combiner              = "OR"\n'
        "  notification_channels = local.notification_channels\n",
        '  display_name          = "${local.alert_prefix}: dead-letter backlog"\n'
        '  combiner              = "OR"\n'
        "  notification_channels = var.notification_channels\n",
        "dead_letter_backlog must notify local.notification_channels",
    ),
    "structure_redis_url_in_env": Breakage(
        "structure",
        "main.tf",
        "{ PUBSUB_TOOLKIT_REDIS_URL_SECRET = ",
        "{ PUBSUB_TOOLKIT_REDIS_URL = ",
        "main.tf: local.redis_env renders PUBSUB_TOOLKIT_REDIS_URL",
    ),
    "structure_eventarc_trigger": Breakage(
        "structure",
        "functions.tf",
        "  service_config {\n",
        "  event_trigger {\n"
        '    event_type   = "google.cloud.pubsub.topic.v1.messagePublished"\n'
        "    pubsub_topic = google_pubsub_topic.this[each.value.trigger_topic].id\n"
        "  }\n\n  service_config {\n",
        "google_cloudfunctions2_function.this has an event_trigger (Eventarc)",
    ),
    # Issue 25, one copy per fix taken out.
    "structure_build_cannot_read_gcf_sources": Breakage(
        "structure",
        "iam.tf",
        'resource "google_project_iam_member" "build_reads_function_sources" {\n'
        "  project = var.project_id\n"
        '  role    = "roles/storage.objectViewer"\n',
        'resource "google_project_iam_member" "build_reads_function_sources" {\n'
        "  project = var.project_id\n"
        '  role    = "roles/logging.logWriter"\n',
        "the build account must read gcf-v2-sources-",
    ),
    "structure_gcf_sources_grant_not_waited_for": Breakage(
        "structure",
        "identities.tf",
        "    { gcf_sources = google_project_iam_member.build_reads_function_sources.id },\n",
        "",
        "time_sleep.build_iam must be triggered by"
        " google_project_iam_member.build_reads_function_sources",
    ),
    "structure_provider_floor_below_direct_vpc_egress": Breakage(
        "structure",
        "versions.tf",
        'version = ">= 7.21, < 9.0"',
        'version = ">= 6.12, < 9.0"',
        "versions.tf: google '>= 6.12, < 9.0' allows releases without direct_vpc_egress",
    ),
    "structure_example_floor_below_direct_vpc_egress": Breakage(
        "structure",
        "examples/minimal/versions.tf",
        'version = ">= 7.21, < 9.0"',
        'version = ">= 6.12, < 9.0"',
        "examples/minimal/versions.tf: google '>= 6.12, < 9.0' allows releases without",
    ),
    "structure_ttl_fields_race_the_app_engine_database": Breakage(
        "structure",
        "firestore.tf",
        "    google_app_engine_application.app,\n  ]\n",
        "  ]\n",
        "google_firestore_field.ttl must depend_on google_app_engine_application.app",
    ),
    "test_ttl_fields_without_any_database": Breakage(
        "test",
        "firestore.tf",
        "      condition     = local.firestore_database_will_exist\n",
        "      condition     = var.firestore_database != null\n",
        "cloud_run_relay_without_a_database_is_refused",
        run=(CLOUD_RUN, "cloud_run_relay_without_a_database_is_refused"),
    ),
    "test_app_engine_tasks_without_app_viewer": Breakage(
        "test",
        "iam.tf",
        "  for_each = local.delay && !local.oidc ? local.enqueuers : toset([])\n",
        "  for_each = toset([])\n",
        "every task creator holds appengine.appViewer",
        run=(WIRING, APP_ENGINE_TARGET_RUN),
    ),
    "test_app_engine_target_in_another_region": Breakage(
        "test",
        "variables.tf",
        '      var.enable_delayed_delivery && var.relay_platform == "app_engine" &&\n'
        '      (var.tasks_target == "appengine"',
        '      false && var.enable_delayed_delivery && var.relay_platform == "app_engine" &&\n'
        '      (var.tasks_target == "appengine"',
        "app_engine_target_outside_the_application_s_region_is_refused",
        run=(WIRING, "app_engine_target_outside_the_application_s_region_is_refused"),
    ),
    "test_cloud_run_tasks_sent_to_the_custom_domain": Breakage(
        "test",
        "main.tf",
        "  relay_url = local.cloud_run ? local.cloud_run_url : (\n"
        '    var.relay_url != null ? trimsuffix(var.relay_url, "/") : (\n',
        '  relay_url = var.relay_url != null ? trimsuffix(var.relay_url, "/") : (\n'
        "    local.cloud_run ? local.cloud_run_url : (\n",
        "tasks still call the run.app URL",
        run=(CLOUD_RUN, "custom_relay_url_is_a_custom_audience"),
        # The old postcondition too, which let a custom domain skip the run.app URL check.
        also=(
            (
                "cloudrun.tf",
                "      condition     = contains(self.urls, local.relay_url)\n",
                "      condition     = var.relay_url != null ||"
                " contains(self.urls, local.relay_url)\n",
            ),
        ),
    ),
    "test_dashboard_sends_zero_positions": Breakage(
        "test",
        "dashboard.tf",
        "            i % 2 == 0 ? {} : { xPos = (i % 2) * 6 },\n"
        "            i < 2 ? {} : { yPos = floor(i / 2) * 4 },\n",
        "            { xPos = (i % 2) * 6 },\n            { yPos = floor(i / 2) * 4 },\n",
        "the dashboard sends no zero tile position",
        run=(OPERATIONS, DASHBOARD_RUN),
    ),
    "test_dashboard_sends_empty_labels": Breakage(
        "test",
        "dashboard.tf",
        '  dashboard_labels = { for k, v in var.labels : k => v if v != "" }\n',
        '  dashboard_labels = { for k, v in var.labels : k => "" }\n',
        "the dashboard's labels are the resources' labels without empty values",
        run=(OPERATIONS, DASHBOARD_RUN),
    ),
    "structure_cloud_run_concurrency_beyond_gunicorn_threads": Breakage(
        "structure",
        "variables.tf",
        "    concurrency         = optional(number, 8)\n",
        "    concurrency         = optional(number, 80)\n",
        "cloud_run_relay.concurrency = '80', app.yaml gunicorn --threads = '8'",
    ),
}


def _copy_module(dest: Path) -> Path:
    tf_dir = dest / "terraform"
    shutil.copytree(
        iac.TERRAFORM_DIR,
        tf_dir,
        ignore=shutil.ignore_patterns(".terraform", ".bundles", "__pycache__"),
    )
    return tf_dir


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name} changed: update the breakage {old!r}"
    path.write_text(text.replace(old, new))


def _keep_only_run(tf_dir: Path, test_file: str, name: str) -> None:
    """Drop every other test file and every run block but ``name`` in ``test_file`` (the ~25
    others only add CPU to the proof)."""
    path = tf_dir / test_file
    for other in (tf_dir / "tests").glob("*.tftest.hcl"):
        if other != path:
            other.unlink()
    head, *runs = re.split(r'(?m)^(?=run ")', path.read_text())
    kept = [run for run in runs if run.startswith(f'run "{name}"')]
    assert len(kept) == 1, f"{path.name} has no run {name!r}: update the breakage's run"
    path.write_text(head + kept[0])


def _broken_copy(dest: Path, breakage: Breakage) -> Path:
    tf_dir = _copy_module(dest)
    for file, old, new in ((breakage.file, breakage.old, breakage.new), *breakage.also):
        _edit(tf_dir / file, old, new)
    if breakage.check == "test":
        _keep_only_run(tf_dir, *breakage.run)
    return tf_dir


@dataclass(frozen=True)
class Runs:
    providers: str  # which terraform providers ran (real or offline), for failure messages
    pristine: dict[str, iac.Result]
    broken: dict[str, iac.Result]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    try:
        iac.require_tools()
    except iac.ToolMissing as missing:
        pytest.fail(str(missing))
    work = tmp_path_factory.mktemp("iac")
    tf = iac.terraform_setup(work / "setup")
    pristine = _copy_module(work / "pristine")
    jobs = [(check, pristine) for check in iac.CHECKS]
    jobs += [(b.check, _broken_copy(work / name, b)) for name, b in BREAKAGES.items()]
    results = iac.run_many(jobs, tf, work / "runs")
    count = len(iac.CHECKS)
    return Runs(
        tf.describe(),
        dict(zip(iac.CHECKS, results[:count], strict=True)),
        dict(zip(BREAKAGES, results[count:], strict=True)),
    )


def test_iac_tools_are_installed() -> None:
    # Missing scanners fail the suite (never skip): `make install` runs scripts/install-iac-tools.
    iac.require_tools()


@pytest.mark.parametrize("check", iac.CHECKS)
def test_check_passes_on_the_module(runs: Runs, check: str) -> None:
    result = runs.pristine[check]
    assert result.ok, f"{check} ({runs.providers}):\n" + "\n".join(
        result.findings or (result.output,)
    )


@pytest.mark.parametrize("name", BREAKAGES)
def test_check_fails_on_a_broken_copy(runs: Runs, name: str) -> None:
    breakage, result = BREAKAGES[name], runs.broken[name]
    assert not result.ok, f"{breakage.check} passed on a copy broken by {name} ({runs.providers})"
    evidence = result.findings or (result.output,)
    if breakage.check == "test":
        # terraform wraps error messages at 80 columns: compare with whitespace collapsed.
        evidence = (*result.findings, " ".join(result.output.split()))
    assert any(breakage.evidence in item for item in evidence), (
        f"{breakage.check} failed, but not for {name}: expected {breakage.evidence!r} in\n"
        + "\n".join(evidence)
    )


def test_every_check_is_proven_to_fail() -> None:
    assert {b.check for b in BREAKAGES.values()} == set(iac.CHECKS)
