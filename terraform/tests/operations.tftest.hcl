# Operations (issue 13): the consumer behind consumer-push, its sweep on Cloud Scheduler, who
# reads the final topic (final-sub only without a consumer), name_prefix on every name, and
# notification channels on every alert. `terraform test` with mocked providers, as in
# wiring.tftest.hcl.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
  mock_resource "google_app_engine_application" {
    defaults = {
      default_hostname = "test-project.ew.r.appspot.com"
      code_bucket      = "staging.test-project.appspot.com"
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


run "consumer_is_pushed_in_order_and_swept_with_a_name_prefix" {
  command = apply

  variables {
    name_prefix = "blue-"
    consumer    = { consumer_id = "billing", handler = "example_handler:handle" }
  }

  assert {
    condition = (
      google_pubsub_subscription.push["consumer"].topic == google_pubsub_topic.this["final"].id &&
      google_pubsub_subscription.push["consumer"].enable_message_ordering &&
      google_pubsub_subscription.push["consumer"].ack_deadline_seconds == 120 &&
      google_pubsub_subscription.push["consumer"].push_config[0].oidc_token[0].audience == google_cloudfunctions2_function.this["consumer"].service_config[0].uri &&
      google_pubsub_subscription.push["consumer"].dead_letter_policy[0].dead_letter_topic == google_pubsub_topic.this["dead_letter"].id
    )
    error_message = "consumer-push: final topic, ordered, ack deadline = the consumer's timeout, OIDC for its URL, dead-lettered."
  }
  assert {
    condition = (
      google_cloud_scheduler_job.sweep[0].schedule == "* * * * *" &&
      google_cloud_scheduler_job.sweep[0].http_target[0].http_method == "POST" &&
      google_cloud_scheduler_job.sweep[0].http_target[0].uri == "${google_cloudfunctions2_function.this["consumer"].service_config[0].uri}/sweep" &&
      google_cloud_scheduler_job.sweep[0].attempt_deadline == "120s"
    )
    error_message = "the sweep job must POST to the consumer's /sweep every minute, within the consumer's timeout."
  }
  assert {
    condition = (
      google_cloud_scheduler_job.sweep[0].http_target[0].oidc_token[0].service_account_email == google_service_account.component["scheduler"].email &&
      google_cloud_scheduler_job.sweep[0].http_target[0].oidc_token[0].audience == google_cloudfunctions2_function.this["consumer"].service_config[0].uri
    )
    error_message = "the sweep job must sign an OIDC token of the scheduler account for the consumer's bare URL."
  }
  assert {
    condition = (
      google_cloud_run_v2_service_iam_member.scheduler_invokes_consumer[0].member == google_service_account.component["scheduler"].member &&
      google_cloud_run_v2_service_iam_member.scheduler_invokes_consumer[0].name == google_cloudfunctions2_function.this["consumer"].service_config[0].service &&
      google_cloud_run_v2_service_iam_member.scheduler_invokes_consumer[0].role == "roles/run.invoker" &&
      google_cloud_run_v2_service_iam_member.push_invokes_function["consumer"].member == google_service_account.component["push"].member
    )
    error_message = "the scheduler account invokes the consumer's service only; the push account invokes it too."
  }
  assert {
    condition     = contains(keys(google_project_service.this), "cloudscheduler.googleapis.com")
    error_message = "the sweep job needs the Cloud Scheduler API."
  }
  assert {
    condition     = length(google_pubsub_subscription.this) == 0 && length(google_monitoring_alert_policy.oldest_unacked) == 0
    error_message = "with the consumer function reading the final topic, no final-sub fills for 7 days unread."
  }
  assert {
    condition     = toset([for t in google_pubsub_topic.this : t.name]) == toset(["blue-origin", "blue-final", "blue-dead-letter"])
    error_message = "topics carry the prefix."
  }
  assert {
    condition = (
      google_pubsub_subscription.push["ingress"].name == "blue-ingress-push" &&
      google_pubsub_subscription.push["consumer"].name == "blue-consumer-push" &&
      google_pubsub_subscription.dead_letter.name == "blue-dead-letter-sub" &&
      google_cloud_scheduler_job.sweep[0].name == "blue-consumer-sweep"
    )
    error_message = "subscriptions and the scheduler job carry the prefix."
  }
  assert {
    condition = (
      google_storage_bucket.sources.name == "test-project-blue-pubsub-toolkit-sources" &&
      google_cloud_tasks_queue.delay[0].name == "blue-pubsub-toolkit-delay" &&
      google_cloudfunctions2_function.this["ingress"].name == "blue-ingress" &&
      google_cloudfunctions2_function.this["consumer"].name == "blue-consumer"
    )
    error_message = "the bucket, the queue and the functions carry the prefix."
  }
  assert {
    condition     = alltrue([for m in google_logging_metric.this : startswith(m.name, "blue-pubsub_toolkit/")]) && alltrue([for p in google_monitoring_alert_policy.log_metric : startswith(p.display_name, "blue-pubsub-toolkit: ")])
    error_message = "log metrics and alert names carry the prefix."
  }
  assert {
    condition     = google_service_account.component["push"].account_id == "ptk-blue-push" && google_service_account.component["tasks-invoker"].account_id == "ptk-blue-tasks-invoker"
    error_message = "service account ids default to ptk-<name_prefix><component>."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_DEDUP_COLLECTION"] == "blue_pubsub_toolkit_dedup" &&
      google_firestore_field.ttl["dedup"].collection == "blue_pubsub_toolkit_dedup" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables["PUBSUB_TOOLKIT_FINAL_TOPIC"] == "blue-final"
    )
    error_message = "the dedup collection (dashes as underscores) and the topics in the environment carry the prefix."
  }
  assert {
    condition = alltrue([
      for env in [
        google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables,
        google_cloudfunctions2_function.this["consumer"].service_config[0].environment_variables,
        output.relay_env_variables,
        output.producer_env,
      ] : lookup(env, "PUBSUB_TOOLKIT_STORE_PREFIX", null) == "blue_"
    ])
    error_message = "every component and the producer's environment get PUBSUB_TOOLKIT_STORE_PREFIX = blue_ (name_prefix, dashes as underscores): FIFO counters, FIFO state and stats of two deployments in one project stay apart."
  }
  assert {
    condition = (
      google_firestore_field.ttl["fifo_state"].collection == "blue_pubsub_toolkit_fifo_state" &&
      google_firestore_field.ttl["stats"].collection == "blue_pubsub_toolkit_stats" &&
      google_firestore_field.ttl["stats_minutes"].collection == "blue_pubsub_toolkit_stats_minutes"
    )
    error_message = "the TTL policies are on the collection groups the prefixed library writes."
  }
  assert {
    condition     = output.producer_env["PUBSUB_TOOLKIT_STORE_BACKEND"] == "firestore" && output.producer_env["GOOGLE_CLOUD_PROJECT"] == "test-project"
    error_message = "the producer's environment names the deployment's project and store backend."
  }
}

run "no_sweep_job_when_asked" {
  command = plan

  variables {
    consumer = { consumer_id = "billing", handler = "example_handler:handle", sweep_schedule = "" }
  }

  assert {
    condition     = length(google_cloud_scheduler_job.sweep) == 0 && !contains(keys(google_service_account.component), "scheduler")
    error_message = "sweep_schedule = \"\": no job and no scheduler account."
  }
}

run "final_sub_without_consumer_and_alerts_notify" {
  command = apply

  variables {
    notification_channels = ["projects/test-project/notificationChannels/42"]
    alert_email           = "oncall@example.com"
  }

  assert {
    condition     = keys(google_pubsub_subscription.this) == ["final-sub"] && google_pubsub_subscription.this["final-sub"].enable_message_ordering
    error_message = "without the consumer function, final-sub (ordered) is created for pubsub_toolkit.Consumer."
  }
  assert {
    condition     = strcontains(google_monitoring_alert_policy.oldest_unacked["final-sub"].conditions[0].condition_threshold[0].filter, "oldest_unacked_message_age") && google_monitoring_alert_policy.oldest_unacked["final-sub"].conditions[0].condition_threshold[0].threshold_value == 86400
    error_message = "final-sub gets an oldest-unacked-age alert (a day), so an unread subscription is noticed."
  }
  assert {
    condition     = google_monitoring_notification_channel.email[0].type == "email" && google_monitoring_notification_channel.email[0].labels["email_address"] == "oncall@example.com"
    error_message = "alert_email creates one email channel."
  }
  assert {
    condition = alltrue([
      for p in concat(values(google_monitoring_alert_policy.log_metric), values(google_monitoring_alert_policy.oldest_unacked), [google_monitoring_alert_policy.dead_letter_backlog]) :
      toset(p.notification_channels) == toset(["projects/test-project/notificationChannels/42", google_monitoring_notification_channel.email[0].id])
    ])
    error_message = "every alert notifies the given channels and the email channel."
  }
  assert {
    condition     = time_sleep.log_metrics.create_duration == "120s"
    error_message = "the alerts wait metric_propagation_wait after the log metrics."
  }
}

run "bad_name_prefix_is_refused" {
  command = plan

  variables {
    name_prefix = "Blue"
  }

  expect_failures = [var.name_prefix]
}

run "alerts_without_a_channel_are_flagged" {
  command = plan

  variables {
    notification_channels = []
  }

  expect_failures = [check.alerts_notify_someone]
}

run "dashboard_charts_the_log_metrics_and_the_otel_metrics" {
  command = apply

  variables {
    name_prefix = "blue-"
    labels      = { team = "ops", empty = "" }
  }

  assert {
    condition = (
      length(google_monitoring_dashboard.this) == 1 &&
      jsondecode(google_monitoring_dashboard.this[0].dashboard_json).displayName == "blue-pubsub-toolkit" &&
      output.dashboard == google_monitoring_dashboard.this[0].id
    )
    error_message = "one dashboard, named with the prefix, its id in the outputs."
  }
  assert {
    condition = alltrue([
      for m in google_logging_metric.this : anytrue([
        for t in jsondecode(google_monitoring_dashboard.this[0].dashboard_json).mosaicLayout.tiles :
        strcontains(t.widget.xyChart.dataSets[0].timeSeriesQuery.timeSeriesFilter.filter, "logging.googleapis.com/user/${m.name}\"")
      ])
    ])
    error_message = "every log-based metric has a chart."
  }
  assert {
    condition = alltrue([
      for name in ["duplicates", "mismatches", "dead_letters", "fifo.parked", "fifo.oldest_gap_age", "delay.lateness", "handler.duration"] : anytrue([
        for t in jsondecode(google_monitoring_dashboard.this[0].dashboard_json).mosaicLayout.tiles :
        strcontains(t.widget.xyChart.dataSets[0].timeSeriesQuery.timeSeriesFilter.filter, "workload.googleapis.com/pubsub_toolkit.${name}\"")
      ])
    ])
    error_message = "every OpenTelemetry metric of pubsub_toolkit.metrics has a chart."
  }
  assert {
    condition = alltrue([
      for t in jsondecode(google_monitoring_dashboard.this[0].dashboard_json).mosaicLayout.tiles :
      try(t.xPos, 0) + t.width <= 12 && try(t.xPos, 0) >= 0
    ])
    error_message = "tiles fit the 12-column mosaic."
  }
  # What the API echoes: zero values and empty ones dropped. Sent as the API returns it, the
  # dashboard plans no change after an apply (provider issues 7242, 16173).
  assert {
    condition = alltrue([
      for t in jsondecode(google_monitoring_dashboard.this[0].dashboard_json).mosaicLayout.tiles :
      try(t.xPos, 1) != 0 && try(t.yPos, 1) != 0 && alltrue([
        for d in t.widget.xyChart.dataSets : length(try(d.timeSeriesQuery.timeSeriesFilter.aggregation.groupByFields, ["absent"])) > 0
      ])
    ])
    error_message = "the dashboard sends no zero tile position and no empty list: the API drops them and every plan would show a diff."
  }
  assert {
    condition     = jsondecode(google_monitoring_dashboard.this[0].dashboard_json).labels == { team = "ops" }
    error_message = "the dashboard's labels are the resources' labels without empty values (the API drops those)."
  }
  assert {
    condition = length(distinct([
      for t in jsondecode(google_monitoring_dashboard.this[0].dashboard_json).mosaicLayout.tiles : [try(t.xPos, 0), try(t.yPos, 0)]
    ])) == length(jsondecode(google_monitoring_dashboard.this[0].dashboard_json).mosaicLayout.tiles)
    error_message = "no two tiles share a position."
  }
}

run "no_dashboard_when_asked" {
  command = plan

  variables {
    create_dashboard = false
  }

  assert {
    condition     = length(google_monitoring_dashboard.this) == 0 && output.dashboard == null
    error_message = "create_dashboard = false makes no dashboard."
  }
}

run "dashboard_without_labels_sends_none" {
  command = apply

  assert {
    condition     = !contains(keys(jsondecode(google_monitoring_dashboard.this[0].dashboard_json)), "labels")
    error_message = "no labels, no labels key: an empty map is dropped by the API (a diff on every plan)."
  }
}
