# Wiring tests: `terraform test` with mocked providers (no credentials, no network). They check
# what connects to what - the values the deployed code depends on - not Google's API behaviour.

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
  project_id             = "test-project"
  region                 = "europe-west1"
  app_engine_location_id = "europe-west"
  build_dir              = "/nonexistent/build"
  # Alerts that notify nobody fail the check alerts_notify_someone (a test error here).
  notification_channels = ["projects/test-project/notificationChannels/1"]
}

run "ingress_is_pushed_from_origin" {
  command = apply

  assert {
    condition     = google_pubsub_subscription.push["ingress"].topic == google_pubsub_topic.this["origin"].id && google_pubsub_subscription.push["ingress"].name == "ingress-push"
    error_message = "ingress-push must deliver the origin topic to ingress."
  }
  assert {
    condition     = length(google_cloudfunctions2_function.this["ingress"].event_trigger) == 0
    error_message = "ingress is an HTTP function behind our push subscription: no Eventarc trigger."
  }
  assert {
    condition = (
      google_pubsub_subscription.push["ingress"].push_config[0].push_endpoint == google_cloudfunctions2_function.this["ingress"].service_config[0].uri &&
      google_pubsub_subscription.push["ingress"].push_config[0].oidc_token[0].audience == google_cloudfunctions2_function.this["ingress"].service_config[0].uri &&
      google_pubsub_subscription.push["ingress"].push_config[0].oidc_token[0].service_account_email == google_service_account.component["push"].email
    )
    error_message = "ingress-push must push to the function's run.app URL with an OIDC token of the push account for that URL."
  }
  assert {
    condition = (
      google_pubsub_subscription.push["ingress"].dead_letter_policy[0].dead_letter_topic == google_pubsub_topic.this["dead_letter"].id &&
      google_pubsub_subscription.push["ingress"].dead_letter_policy[0].max_delivery_attempts == 10 &&
      google_pubsub_subscription.push["ingress"].retry_policy[0].minimum_backoff == "10s" &&
      google_pubsub_subscription.push["ingress"].retry_policy[0].maximum_backoff == "600s"
    )
    error_message = "ingress-push must dead-letter after 10 attempts with a 10s..600s retry backoff."
  }
  assert {
    condition = (
      google_pubsub_subscription.push["ingress"].ack_deadline_seconds == 60 &&
      google_pubsub_subscription.push["ingress"].message_retention_duration == "604800s" &&
      google_pubsub_subscription.push["ingress"].expiration_policy[0].ttl == "" &&
      !google_pubsub_subscription.push["ingress"].enable_message_ordering
    )
    error_message = "ingress-push: ack deadline = the function's timeout, 7 days retention, never expires, unordered."
  }
  assert {
    condition     = google_pubsub_subscription_iam_member.service_agent_push_subscriber["ingress"].member == "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com" && google_pubsub_subscription_iam_member.service_agent_push_subscriber["ingress"].role == "roles/pubsub.subscriber"
    error_message = "Pub/Sub's service agent must be able to ack what it dead-letters from ingress-push."
  }
  assert {
    condition = [
      for m in google_service_account_iam_member.pubsub_agent_token_creator : [m.service_account_id, m.role, m.member]
      ] == [
      [google_service_account.component["push"].name, "roles/iam.serviceAccountTokenCreator", "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com"]
    ]
    error_message = "old projects: the Pub/Sub service agent needs token creator on the push account (and only there)."
  }
  assert {
    condition     = google_project_service_identity.pubsub.service == "pubsub.googleapis.com" && time_sleep.service_identities.create_duration == "60s"
    error_message = "the Pub/Sub service agent is created explicitly and waited for."
  }
  assert {
    condition = (
      google_project_iam_member.build_reads_function_sources.role == "roles/storage.objectViewer" &&
      google_project_iam_member.build_reads_function_sources.member == google_service_account.component["build"].member &&
      strcontains(google_project_iam_member.build_reads_function_sources.condition[0].expression, "\"projects/_/buckets/gcf-v2-sources-123456789012-europe-west1\"")
    )
    error_message = "the build account reads gcf-v2-sources-PROJECT_NUMBER-REGION, where Cloud Functions copies the source before building."
  }
  assert {
    condition     = google_cloudfunctions2_function.this["ingress"].build_config[0].entry_point == "ingress"
    error_message = "ingress entry point must be the function in functions/ingress/main.py."
  }
  assert {
    condition     = google_cloudfunctions2_function.this["ingress"].build_config[0].source[0].storage_source[0].object == google_storage_bucket_object.function["ingress"].name
    error_message = "ingress must deploy the uploaded bundle."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_FINAL_TOPIC"] == "final" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC"] == "dead-letter" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["GOOGLE_CLOUD_PROJECT"] == "test-project"
    )
    error_message = "ingress environment must name the project, final and dead-letter topics."
  }
  assert {
    condition     = google_cloudfunctions2_function.this["ingress"].service_config[0].service_account_email == google_service_account.component["ingress"].email
    error_message = "ingress must run as its own service account."
  }
  assert {
    condition = (
      google_cloud_run_v2_service_iam_member.push_invokes_function["ingress"].member == google_service_account.component["push"].member &&
      google_cloud_run_v2_service_iam_member.push_invokes_function["ingress"].role == "roles/run.invoker" &&
      google_cloud_run_v2_service_iam_member.push_invokes_function["ingress"].name == google_cloudfunctions2_function.this["ingress"].service_config[0].service
    )
    error_message = "the push account must be allowed to invoke ingress's service."
  }
  assert {
    condition     = !contains(keys(google_cloudfunctions2_function.this), "consumer")
    error_message = "the consumer function is optional and off by default."
  }
}

run "every_subscription_has_a_dead_letter_policy" {
  command = apply

  variables {
    subscriptions = {
      "final-sub"    = { topic = "final", enable_message_ordering = true }
      "billing"      = { topic = "final", max_delivery_attempts = 20 }
      "origin-audit" = { topic = "origin" }
    }
  }

  assert {
    condition = alltrue([
      for s in google_pubsub_subscription.this :
      length(s.dead_letter_policy) == 1 && s.dead_letter_policy[0].dead_letter_topic == google_pubsub_topic.this["dead_letter"].id
    ])
    error_message = "every subscription must dead-letter to the dead-letter topic."
  }
  assert {
    condition     = alltrue([for s in google_pubsub_subscription.this : length(s.retry_policy) == 1])
    error_message = "every subscription must have a retry policy."
  }
  assert {
    condition     = length(google_pubsub_subscription.dead_letter.retry_policy) == 0 && google_pubsub_subscription.dead_letter.topic == google_pubsub_topic.this["dead_letter"].id
    error_message = "the terminal dead-letter subscription reads the dead-letter topic with no retry backoff (listing nacks; a backoff would hide dead letters from operators)."
  }
  assert {
    condition     = google_pubsub_subscription.this["final-sub"].enable_message_ordering && google_pubsub_subscription.this["final-sub"].topic == google_pubsub_topic.this["final"].id
    error_message = "the final subscription must enable message ordering."
  }
  assert {
    condition = alltrue([
      for k, s in google_pubsub_subscription.this :
      google_pubsub_subscription_iam_member.service_agent_subscriber[k].member == "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com" &&
      google_pubsub_subscription_iam_member.service_agent_subscriber[k].role == "roles/pubsub.subscriber"
    ])
    error_message = "Pub/Sub's service agent must be able to subscribe to every source subscription."
  }
  assert {
    condition = (
      google_pubsub_topic_iam_member.service_agent_dead_letter_publisher.topic == google_pubsub_topic.this["dead_letter"].name &&
      google_pubsub_topic_iam_member.service_agent_dead_letter_publisher.role == "roles/pubsub.publisher"
    )
    error_message = "Pub/Sub's service agent must be able to publish to the dead-letter topic."
  }
  assert {
    condition     = alltrue([for t in google_pubsub_topic.this : t.message_retention_duration == "604800s"])
    error_message = "every topic retains messages."
  }
}

run "oidc_audience_is_the_relay_url" {
  command = apply

  assert {
    condition     = google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience == "https://test-project.ew.r.appspot.com"
    error_message = "the queue's OIDC audience must be the relay's URL."
  }
  assert {
    condition     = google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].service_account_email == google_service_account.component["tasks-invoker"].email
    error_message = "tasks must sign their OIDC tokens as the invoker account."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_RELAY_URL"] == google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"] == google_service_account.component["tasks-invoker"].email &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_TASKS_TARGET"] == "http" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_TASKS_QUEUE"] == "projects/test-project/locations/europe-west1/queues/pubsub-toolkit-delay"
    )
    error_message = "ingress must create HTTP tasks on the queue, for the relay's URL, signed as the invoker."
  }
  assert {
    condition = (
      google_app_engine_standard_app_version.relay[0].env_variables["PUBSUB_TOOLKIT_RELAY_AUDIENCE"] == "https://test-project.ew.r.appspot.com" &&
      google_app_engine_standard_app_version.relay[0].env_variables["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"] == google_service_account.component["tasks-invoker"].email &&
      google_app_engine_standard_app_version.relay[0].env_variables["PUBSUB_TOOLKIT_RELAY_AUTH"] == "oidc"
    )
    error_message = "the relay must accept exactly the invoker's tokens for its own URL."
  }
  assert {
    condition     = google_app_engine_standard_app_version.relay[0].env_variables["PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS"] == tostring(google_cloud_tasks_queue.delay[0].retry_config[0].max_attempts)
    error_message = "the relay must know the queue's max_attempts, to dead-letter on the last attempt instead of losing the message with the task."
  }
  assert {
    condition     = google_app_engine_standard_app_version.relay[0].service_account == google_service_account.component["relay"].email
    error_message = "the relay must run as its own service account."
  }
  assert {
    condition     = google_app_engine_service_split_traffic.relay[0].split[0].allocations[google_app_engine_standard_app_version.relay[0].version_id] == "1"
    error_message = "the new relay version must receive all traffic."
  }
  assert {
    condition = (
      toset(keys(google_service_account_iam_member.act_as_invoker)) == toset(["ingress", "relay"]) &&
      alltrue([for m in google_service_account_iam_member.act_as_invoker : m.service_account_id == google_service_account.component["tasks-invoker"].name && m.role == "roles/iam.serviceAccountUser"])
    )
    error_message = "serviceAccountUser only for the task creators, only on the invoker account."
  }
  assert {
    condition     = toset(keys(google_cloud_tasks_queue_iam_member.enqueuer)) == toset(["ingress", "relay"])
    error_message = "only ingress and the relay (long-delay hops) create tasks."
  }
  assert {
    condition     = google_app_engine_application.app[0].database_type == "CLOUD_FIRESTORE"
    error_message = "the App Engine application must not create a Datastore-mode (default) database."
  }
  assert {
    condition = (
      toset([for m in google_project_iam_member.relay_build : m.role]) == toset(["roles/logging.logWriter", "roles/artifactregistry.createOnPushWriter"]) &&
      alltrue([for m in google_project_iam_member.relay_build : m.member == google_service_account.component["relay"].member]) &&
      google_storage_bucket_iam_member.relay_build_reads_staging["staging"].bucket == google_app_engine_application.app[0].code_bucket &&
      google_storage_bucket_iam_member.relay_build_reads_staging["staging"].role == "roles/storage.objectViewer" &&
      google_storage_bucket_iam_member.relay_build_reads_staging["staging"].member == google_service_account.component["relay"].member
    )
    error_message = "the relay's account builds its App Engine version: staging bucket reader, log writer, createOnPushWriter."
  }
  assert {
    condition = (
      contains(keys(google_project_service.this), "cloudresourcemanager.googleapis.com") &&
      contains(keys(google_project_service.this), "serviceusage.googleapis.com") &&
      !contains(keys(google_project_service.this), "eventarc.googleapis.com") &&
      !contains(keys(google_project_service.this), "secretmanager.googleapis.com") &&
      !contains(keys(google_project_service.this), "cloudscheduler.googleapis.com")
    )
    error_message = "APIs: cloudresourcemanager and serviceusage on, Eventarc off; Secret Manager and Scheduler only when used."
  }
  assert {
    condition     = google_storage_bucket_iam_member.appengine_reads_sources["service_agent"].member == "serviceAccount:service-123456789012@gcp-gae-service.iam.gserviceaccount.com" && length(time_sleep.app_engine_service_agent) == 1
    error_message = "the App Engine service agent reads the bundle, after the application (and its agent) exists."
  }
}

run "explicit_relay_url_without_creating_app_engine" {
  command = apply

  variables {
    create_app_engine_application = false
    relay_url                     = "https://relay.example.com/"
    # Nothing here creates (default) then: it must be there already.
    firestore_database_exists = true
  }

  assert {
    condition     = google_cloud_tasks_queue.delay[0].http_target[0].oidc_token[0].audience == "https://relay.example.com"
    error_message = "the audience is the given relay URL without its trailing slash."
  }
  assert {
    condition     = length(google_app_engine_application.app) == 0
    error_message = "no App Engine application is created when told not to."
  }
}

run "http_target_needs_a_relay_url" {
  command = plan

  variables {
    create_app_engine_application = false
    firestore_database_exists     = true
  }

  expect_failures = [google_cloud_tasks_queue.delay]
}

run "app_engine_target_uses_routing_not_oidc" {
  command = apply

  variables {
    tasks_target = "appengine"
  }

  assert {
    condition     = length(google_cloud_tasks_queue.delay[0].http_target) == 0 && google_cloud_tasks_queue.delay[0].app_engine_routing_override[0].service == "default"
    error_message = "App Engine targets route to the relay's service without OIDC."
  }
  assert {
    condition     = !contains(keys(google_service_account.component), "tasks-invoker") && length(google_service_account_iam_member.act_as_invoker) == 0
    error_message = "no invoker account, and nobody acts as one, without OIDC."
  }
  assert {
    condition     = google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_RELAY_AUTH"] == "appengine"
    error_message = "the relay must trust the App Engine queue header."
  }
  assert {
    condition = {
      for k, m in google_project_iam_member.enqueuer_reads_app_engine : k => [m.role, m.member]
      } == {
      for k in ["ingress", "relay"] : k => ["roles/appengine.appViewer", google_service_account.component[k].member]
    }
    error_message = "App Engine-routed tasks need appengine.applications.get: every task creator holds appengine.appViewer."
  }
}

run "app_engine_target_outside_the_application_s_region_is_refused" {
  command = plan

  variables {
    tasks_target = "appengine"
    region       = "europe-west3"
  }

  expect_failures = [var.app_engine_location_id]
}

run "app_engine_relay_connector_outside_the_application_s_region_is_refused" {
  command = plan

  variables {
    region  = "us-east1"
    network = { connector = "projects/test-project/locations/us-east1/connectors/ptk" }
  }

  expect_failures = [var.app_engine_location_id]
}

# App Engine spells europe-west1 and us-central1 without the 1 (and refuses them with the 1): a
# new user copying the region into app_engine_location_id must be stopped at plan, not by the
# application's create call in the middle of the first apply.
run "app_engine_location_spelled_as_its_region_is_refused" {
  command = plan

  variables {
    app_engine_location_id = "europe-west1"
  }

  expect_failures = [var.app_engine_location_id]
}

run "http_targets_need_no_app_engine_role" {
  command = plan

  assert {
    condition     = length(google_project_iam_member.enqueuer_reads_app_engine) == 0
    error_message = "OIDC (HTTP) tasks need no App Engine role."
  }
}

run "ttl_fields_wait_for_the_database_app_engine_creates" {
  command = plan

  assert {
    condition     = length(google_app_engine_application.app) == 1 && length(google_firestore_database.this) == 0 && length(google_firestore_field.ttl) == 4
    error_message = "the example's defaults: the App Engine application creates (default), and the TTL fields are planned after it."
  }
}

run "ttl_fields_without_any_database_are_refused" {
  command = plan

  variables {
    create_app_engine_application = false
    relay_url                     = "https://relay.example.com"
  }

  expect_failures = [google_firestore_field.ttl]
}

run "dedup_records_have_a_ttl_on_expire_at" {
  command = apply

  assert {
    condition = (
      google_firestore_field.ttl["dedup"].collection == "pubsub_toolkit_dedup" &&
      google_firestore_field.ttl["dedup"].field == "expire_at" &&
      length(google_firestore_field.ttl["dedup"].ttl_config) == 1
    )
    error_message = "the dedup collection group needs a TTL policy on expire_at."
  }
  assert {
    condition = (
      google_firestore_field.ttl["stats"].collection == "pubsub_toolkit_stats" &&
      google_firestore_field.ttl["stats"].field == "expire_at"
    )
    error_message = "the ingress stats documents (status page) need a TTL policy on expire_at."
  }
  assert {
    condition = (
      google_firestore_field.ttl["stats_minutes"].collection == "pubsub_toolkit_stats_minutes" &&
      google_firestore_field.ttl["stats_minutes"].field == "expire_at"
    )
    error_message = "the per-minute stats documents (status page charts) expire: TTL on pubsub_toolkit_stats_minutes.expire_at."
  }
  assert {
    condition = (
      google_firestore_field.ttl["fifo_state"].collection == "pubsub_toolkit_fifo_state" &&
      google_firestore_field.ttl["fifo_state"].field == "expire_at"
    )
    error_message = "a FIFO group completed by its end-of-group message expires: TTL on pubsub_toolkit_fifo_state.expire_at."
  }
  assert {
    condition     = !contains(keys(output.ingress_env), "PUBSUB_TOOLKIT_STORE_PREFIX") && !contains(keys(output.producer_env), "PUBSUB_TOOLKIT_STORE_PREFIX")
    error_message = "without a name_prefix no PUBSUB_TOOLKIT_STORE_PREFIX is rendered: the library's unprefixed names, as before."
  }
  assert {
    condition     = google_firestore_field.ttl["dedup"].database == "(default)"
    error_message = "the TTL policy belongs to PUBSUB_TOOLKIT_FIRESTORE_DATABASE."
  }
  assert {
    condition     = toset(keys(google_project_iam_member.firestore_user)) == toset(["ingress", "relay"])
    error_message = "only the components that read and write records use Firestore."
  }
}

run "no_primitive_roles" {
  command = apply

  variables {
    consumer = { consumer_id = "billing", handler = "example_handler:handle" }
  }

  assert {
    condition = alltrue([
      for m in concat(values(google_project_iam_member.firestore_user), values(google_project_iam_member.build)) :
      !contains(["roles/owner", "roles/editor", "roles/viewer"], m.role)
    ])
    error_message = "no primitive roles."
  }
  assert {
    condition     = google_pubsub_subscription.push["consumer"].topic == google_pubsub_topic.this["final"].id && length(google_cloudfunctions2_function.this["consumer"].event_trigger) == 0
    error_message = "the consumer function reads the final topic through consumer-push."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["consumer"].service_config[0].environment_variables["PUBSUB_TOOLKIT_CONSUMER_ID"] == "billing" &&
      google_cloudfunctions2_function.this["consumer"].service_config[0].environment_variables["PUBSUB_TOOLKIT_HANDLER"] == "example_handler:handle"
    )
    error_message = "the consumer function needs PUBSUB_TOOLKIT_CONSUMER_ID and PUBSUB_TOOLKIT_HANDLER."
  }
  assert {
    condition     = toset(keys(google_pubsub_topic_iam_member.publisher)) == toset(["ingress/final", "ingress/dead_letter", "relay/final", "relay/dead_letter", "consumer/dead_letter"])
    error_message = "publishers are exactly ingress and relay (final, dead-letter) and the consumer (dead-letter)."
  }
}

run "delays_off" {
  command = apply

  variables {
    enable_delayed_delivery   = false
    firestore_database_exists = true
  }

  assert {
    condition     = length(google_cloud_tasks_queue.delay) == 0 && length(google_app_engine_standard_app_version.relay) == 0
    error_message = "no queue and no relay when delayed delivery is off."
  }
  assert {
    condition     = !contains(keys(google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables), "PUBSUB_TOOLKIT_TASKS_QUEUE")
    error_message = "PUBSUB_TOOLKIT_TASKS_QUEUE stays unset, so ingress dead-letters due-later messages instead of delivering them early."
  }
}

run "ttl_shorter_than_redelivery_window_is_refused" {
  command = plan

  variables {
    dedup_ttl_seconds = 3600
  }

  expect_failures = [var.dedup_ttl_seconds]
}

run "tasks_max_backoff_of_two_hours_or_more_is_refused" {
  command = plan

  variables {
    tasks_retry = { max_backoff = "7200s" }
  }

  expect_failures = [var.tasks_retry]
}

run "log_metrics_and_alerts" {
  command = apply

  assert {
    condition     = strcontains(google_logging_metric.this["fingerprint_mismatch"].filter, "jsonPayload.alert=\"fingerprint_mismatch\"")
    error_message = "the mismatch metric counts the alert=fingerprint_mismatch log lines."
  }
  assert {
    condition     = strcontains(google_logging_metric.this["fifo_gap_timeout"].filter, "jsonPayload.outcome=\"gap_timeout\"")
    error_message = "the gap metric counts outcome=gap_timeout log lines."
  }
  assert {
    condition     = strcontains(google_logging_metric.this["dead_lettered"].filter, "jsonPayload.outcome=\"dead_lettered\"")
    error_message = "the dead-letter metric counts outcome=dead_lettered log lines."
  }
  assert {
    condition     = alltrue([for k, p in google_monitoring_alert_policy.log_metric : strcontains(p.conditions[0].condition_threshold[0].filter, google_logging_metric.this[k].name)])
    error_message = "each alert policy watches its own log-based metric."
  }
  assert {
    condition     = strcontains(google_monitoring_alert_policy.dead_letter_backlog.conditions[0].condition_threshold[0].filter, "subscription_id=\"dead-letter-sub\"")
    error_message = "the backlog alert watches the dead-letter subscription."
  }
}

run "firestore_default_created_with_the_application_s_location" {
  command = plan

  variables {
    create_firestore_database = true
    firestore_location_id     = "eur3"
  }

  assert {
    condition     = length(google_firestore_database.this) == 1 && length(google_app_engine_application.app) == 1
    error_message = "(default) in eur3 and the application in europe-west share the project's default location."
  }
}

run "firestore_default_elsewhere_than_the_application_is_refused" {
  command = plan

  variables {
    create_firestore_database = true
    firestore_location_id     = "europe-west1"
  }

  expect_failures = [google_app_engine_application.app]
}

run "pubsub_exactly_once_and_ingress_ordering_are_options" {
  command = apply

  variables {
    exactly_once_delivery    = true
    ingress_message_ordering = true
  }

  assert {
    condition     = google_pubsub_subscription.this["final-sub"].enable_exactly_once_delivery && google_pubsub_subscription.this["final-sub"].enable_message_ordering
    error_message = "exactly_once_delivery = true must turn exactly-once delivery on for the default final-sub (ordering stays on)."
  }
  assert {
    condition     = google_pubsub_subscription.push["ingress"].enable_message_ordering
    error_message = "ingress_message_ordering = true must order the ingress push subscription."
  }
}

run "pubsub_exactly_once_and_ingress_ordering_are_off_by_default" {
  command = apply

  assert {
    condition     = !google_pubsub_subscription.this["final-sub"].enable_exactly_once_delivery && !google_pubsub_subscription.push["ingress"].enable_message_ordering
    error_message = "exactly-once delivery and ingress ordering are opt-in (each has a cost: docs/how-to/deploy.md)."
  }
}
