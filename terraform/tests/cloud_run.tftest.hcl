# The relay on Cloud Run (relay_platform = "cloud_run"): `terraform test` with mocked providers,
# as in wiring.tftest.hcl. They check what the relay's callers and checks depend on - the service,
# who may invoke it, the URL and audience every task carries, the environment the relay reads -
# and that App Engine is absent (and Cloud Run absent on the default App Engine path).

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
  mock_resource "google_app_engine_application" {
    defaults = {
      default_hostname = "test-project.ew.r.appspot.com"
    }
  }
  # What Cloud Run assigns: the deterministic URL (NAME-PROJECT_NUMBER.REGION.run.app) and the
  # older hash-based one.
  mock_resource "google_cloud_run_v2_service" {
    defaults = {
      urls = [
        "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app",
        "https://pubsub-toolkit-relay-a1b2c3d4e5-ew.a.run.app",
      ]
    }
  }
}

mock_provider "google-beta" {}

mock_provider "time" {}

mock_provider "archive" {
  mock_data "archive_file" {
    defaults = {
      output_md5  = "0123456789abcdef0123456789abcdef"
      output_path = "/nonexistent/bundle.zip"
    }
  }
}

variables {
  project_id = "test-project"
  region     = "europe-west1"
  build_dir  = "/nonexistent/build"
  # Alerts that notify nobody fail the check alerts_notify_someone (a test error here).
  notification_channels = ["projects/test-project/notificationChannels/1"]
  relay_platform        = "cloud_run"
  # No App Engine application creates (default) here: the project has it already.
  firestore_database_exists = true
  cloud_run_relay = {
    image = "europe-west1-docker.pkg.dev/test-project/cloud-run-source-deploy/pubsub-toolkit-relay:0123abcd"
  }
}

run "cloud_run_relay_replaces_app_engine" {
  command = apply

  assert {
    condition     = length(google_cloud_run_v2_service.relay) == 1
    error_message = "relay_platform = cloud_run creates the relay's Cloud Run service."
  }
  assert {
    condition = (
      length(google_app_engine_application.app) == 0 &&
      length(google_app_engine_standard_app_version.relay) == 0 &&
      length(google_app_engine_service_split_traffic.relay) == 0 &&
      length(google_storage_bucket_iam_member.appengine_reads_sources) == 0 &&
      length(data.archive_file.relay) == 0
    )
    error_message = "no App Engine application, version, traffic split, bundle or bucket grant on Cloud Run."
  }
  assert {
    condition     = !contains(keys(google_project_service.this), "appengine.googleapis.com") && contains(keys(google_project_service.this), "run.googleapis.com")
    error_message = "the Cloud Run relay needs the Cloud Run API, not App Engine's."
  }
  assert {
    condition = (
      google_cloud_run_v2_service.relay[0].name == "pubsub-toolkit-relay" &&
      google_cloud_run_v2_service.relay[0].location == "europe-west1" &&
      google_cloud_run_v2_service.relay[0].template[0].containers[0].image == "europe-west1-docker.pkg.dev/test-project/cloud-run-source-deploy/pubsub-toolkit-relay:0123abcd"
    )
    error_message = "the service runs the given image in the module's region."
  }
  assert {
    condition     = google_cloud_run_v2_service.relay[0].template[0].service_account == google_service_account.component["relay"].email
    error_message = "the relay runs as its own service account."
  }
  assert {
    condition     = google_cloud_run_v2_service.relay[0].ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY" && google_cloud_run_v2_service.relay[0].invoker_iam_disabled == false
    error_message = "internal ingress (Cloud Tasks of the project only) and the IAM invoker check on, by default."
  }
  assert {
    condition = (
      google_cloud_run_v2_service.relay[0].template[0].scaling[0].min_instance_count == 0 &&
      google_cloud_run_v2_service.relay[0].template[0].scaling[0].max_instance_count == 10 &&
      google_cloud_run_v2_service.relay[0].template[0].max_instance_request_concurrency == 8 &&
      google_cloud_run_v2_service.relay[0].template[0].timeout == "120s"
    )
    error_message = "the App Engine relay's scaling (0-10 instances, 8 requests each) and gunicorn's 120 s timeout."
  }
  assert {
    condition     = google_cloud_run_v2_service.relay[0].template[0].containers[0].startup_probe[0].http_get[0].path == "/healthz"
    error_message = "a revision whose app does not start must not get traffic: the startup probe asks /healthz."
  }
  assert {
    condition     = google_cloud_run_v2_service.relay[0].traffic[0].type == "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST" && google_cloud_run_v2_service.relay[0].traffic[0].percent == 100
    error_message = "the newest revision serves all traffic."
  }
  assert {
    condition     = output.relay_platform == "cloud_run" && output.relay_service.name == "pubsub-toolkit-relay"
    error_message = "the outputs name the platform and the service."
  }
}

run "tasks_reach_the_service_url_signed_for_it" {
  command = apply

  assert {
    condition     = google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience == "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app"
    error_message = "the queue's OIDC audience is the service's deterministic URL."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_RELAY_URL"] == "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_TASKS_TARGET"] == "http" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"] == google_service_account.component["tasks-invoker"].email
    )
    error_message = "ingress creates HTTP tasks for PUBSUB_TOOLKIT_RELAY_URL/release on the service, signed as the invoker."
  }
  assert {
    condition     = output.relay_url == "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app"
    error_message = "the relay_url output is the service's URL."
  }
  assert {
    condition = (
      google_cloud_run_v2_service_iam_member.tasks_invoker_invokes_relay[0].name == google_cloud_run_v2_service.relay[0].name &&
      google_cloud_run_v2_service_iam_member.tasks_invoker_invokes_relay[0].location == "europe-west1" &&
      google_cloud_run_v2_service_iam_member.tasks_invoker_invokes_relay[0].role == "roles/run.invoker" &&
      google_cloud_run_v2_service_iam_member.tasks_invoker_invokes_relay[0].member == google_service_account.component["tasks-invoker"].member
    )
    error_message = "the Cloud Tasks invoker account, and only it, is granted run.invoker on the relay's service."
  }
  assert {
    condition     = google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].service_account_email == google_service_account.component["tasks-invoker"].email
    error_message = "tasks sign their tokens as the account that holds run.invoker."
  }
  assert {
    condition = alltrue([
      for m in google_service_account_iam_member.act_as_invoker :
      m.service_account_id == google_service_account.component["tasks-invoker"].name
    ]) && toset(keys(google_service_account_iam_member.act_as_invoker)) == toset(["ingress", "relay"])
    error_message = "ingress and the relay (long-delay hops) create tasks acting as the invoker, as on App Engine."
  }
}

run "relay_reads_the_same_oidc_settings" {
  command = apply

  assert {
    condition = (
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_RELAY_AUDIENCE"] == google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience &&
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_RELAY_URL"] == google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience &&
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"] == google_service_account.component["tasks-invoker"].email &&
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_RELAY_AUTH"] == "oidc"
    )
    error_message = "the relay checks the tokens' audience (its URL) and email (the invoker) itself, as on App Engine."
  }
  assert {
    condition     = { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM"] == "true"
    error_message = "the relay is told Cloud Run's IAM check verified the signature it strips."
  }
  assert {
    condition = (
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_TASKS_QUEUE"] == "projects/test-project/locations/europe-west1/queues/pubsub-toolkit-delay" &&
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["GOOGLE_CLOUD_PROJECT"] == "test-project" &&
      { for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name => e.value }["PUBSUB_TOOLKIT_FINAL_TOPIC"] == "final"
    )
    error_message = "the relay knows its project (Cloud Run does not set GOOGLE_CLOUD_PROJECT), queue and topics."
  }
  assert {
    condition     = length(setintersection(toset([for e in google_cloud_run_v2_service.relay[0].template[0].containers[0].env : e.name]), toset(["PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION"]))) == 0
    error_message = "Cloud Run refuses its reserved environment variable names."
  }
  assert {
    condition     = google_cloud_run_v2_service.relay[0].custom_audiences == null
    error_message = "no custom audience without a custom relay_url (Cloud Run accepts its own URLs)."
  }
  assert {
    condition     = toset(keys(google_project_iam_member.firestore_user)) == toset(["ingress", "relay"]) && toset(keys(google_pubsub_topic_iam_member.publisher)) == toset(["ingress/final", "ingress/dead_letter", "relay/final", "relay/dead_letter"])
    error_message = "the relay's account keeps its Firestore and publisher grants on Cloud Run."
  }
}

run "custom_relay_url_is_a_custom_audience" {
  command = apply

  variables {
    relay_url = "https://relay.example.com/"
  }

  assert {
    condition     = google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience == "https://relay.example.com"
    error_message = "tasks carry the given relay URL as audience."
  }
  assert {
    condition     = google_cloud_run_v2_service.relay[0].custom_audiences == tolist(["https://relay.example.com"])
    error_message = "Cloud Run must accept tokens for the custom URL, or its IAM check refuses every task."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_RELAY_URL"] == "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_RELAY_AUDIENCE"] == "https://relay.example.com" &&
      google_cloud_run_v2_service.relay[0].template[0].containers[0].env[index(google_cloud_run_v2_service.relay[0].template[0].containers[0].env[*].name, "PUBSUB_TOOLKIT_RELAY_AUDIENCE")].value == "https://relay.example.com" &&
      output.relay_url == "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app"
    )
    error_message = "tasks still call the run.app URL (Cloud Tasks is internal traffic there only; a custom domain is refused by an internal-only relay): the custom domain is the audience alone."
  }
}

run "cloud_run_relay_without_a_database_is_refused" {
  command = plan

  variables {
    firestore_database_exists = false
  }

  expect_failures = [google_firestore_field.ttl]
}

run "cloud_run_relay_image_is_built_by_the_build_account_into_its_own_bucket" {
  command = apply

  assert {
    condition = (
      google_storage_bucket.builds[0].name == "test-project-pubsub-toolkit-builds" &&
      google_storage_bucket.builds[0].location == "europe-west1" &&
      google_storage_bucket_iam_member.build_uses_builds_bucket[0].member == google_service_account.component["build"].member
    )
    error_message = "the relay's image is built by the build account, its logs in a regional bucket of the deployment's (scripts/deploy-terraform: --service-account, --gcs-log-dir)."
  }
}

run "app_engine_default_has_no_cloud_run_relay" {
  command = apply

  variables {
    relay_platform         = "app_engine"
    app_engine_location_id = "europe-west"
  }

  assert {
    condition     = length(google_cloud_run_v2_service.relay) == 0 && length(google_cloud_run_v2_service_iam_member.tasks_invoker_invokes_relay) == 0
    error_message = "no Cloud Run relay or invoker binding on App Engine."
  }
  assert {
    condition     = length(google_app_engine_standard_app_version.relay) == 1 && google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience == "https://test-project.ew.r.appspot.com"
    error_message = "App Engine keeps its relay version and URL."
  }
  assert {
    condition     = contains(keys(google_project_service.this), "appengine.googleapis.com")
    error_message = "App Engine needs its API."
  }
  assert {
    condition     = !contains(keys(google_app_engine_standard_app_version.relay[0].env_variables), "PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM") && output.relay_service == null
    error_message = "App Engine's relay never trusts a stripped signature: nothing strips it there."
  }
}

run "delays_off_means_no_relay_on_either_platform" {
  command = apply

  variables {
    enable_delayed_delivery = false
  }

  assert {
    condition     = length(google_cloud_run_v2_service.relay) == 0 && length(google_app_engine_application.app) == 0 && length(google_cloud_tasks_queue.delay) == 0
    error_message = "no relay, no application and no queue without delayed delivery."
  }
}

run "cloud_run_needs_an_image" {
  command = plan

  variables {
    cloud_run_relay = {}
  }

  expect_failures = [google_cloud_run_v2_service.relay]
}

run "cloud_run_refuses_app_engine_routing" {
  command = plan

  variables {
    tasks_target = "appengine"
  }

  expect_failures = [google_cloud_run_v2_service.relay]
}

run "cloud_run_refuses_the_app_engine_gcloud_deploy" {
  command = plan

  variables {
    relay_deploy = "gcloud"
  }

  expect_failures = [google_cloud_run_v2_service.relay]
}

run "relay_platform_is_validated" {
  command = plan

  variables {
    relay_platform = "gke"
  }

  expect_failures = [var.relay_platform]
}

run "cloud_run_name_must_fit_the_deterministic_url" {
  command = plan

  variables {
    cloud_run_relay = {
      name  = "a-relay-name-that-is-far-too-long-for-one-dns-label-with-the-number"
      image = "europe-west1-docker.pkg.dev/test-project/r/relay:1"
    }
  }

  expect_failures = [var.cloud_run_relay]
}

run "cloud_run_ingress_is_validated" {
  command = plan

  variables {
    cloud_run_relay = {
      ingress = "internal"
      image   = "europe-west1-docker.pkg.dev/test-project/r/relay:1"
    }
  }

  expect_failures = [var.cloud_run_relay]
}

# If Cloud Run did not assign the URL the tasks were planned with, the apply fails instead of
# leaving a relay that refuses every task.
run "service_without_the_planned_url_fails_the_apply" {
  command = apply

  override_resource {
    target = google_cloud_run_v2_service.relay
    values = {
      urls = ["https://pubsub-toolkit-relay-a1b2c3d4e5-ew.a.run.app"]
    }
  }

  expect_failures = [google_cloud_run_v2_service.relay]
}
