# Log-based metrics over the toolkit's decision logs, and alert policies on them.
#
# Every decision is one JSON line (Cloud Logging parses it into jsonPayload) from the logger
# "pubsub_toolkit.decisions" with `outcome`, `dedup_key`, `consumer` and extra fields:
#   dead-lettered:        outcome "dead_lettered", reason "<error_reason>"
#   fingerprint mismatch: alert "fingerprint_mismatch" (outcome "mismatch")
#   FIFO gap timeout:     outcome "gap_timeout" (consumer, fifo_group)

locals {
  decision_filter = "jsonPayload.logger=\"pubsub_toolkit.decisions\""

  log_metrics = {
    dead_lettered = {
      description = "Messages the toolkit dead-lettered, by error_reason."
      filter      = "${local.decision_filter} AND jsonPayload.outcome=\"dead_lettered\""
      label       = "reason"
      extractor   = "EXTRACT(jsonPayload.reason)"
      threshold   = var.alert_thresholds.dead_lettered_per_period
      alert       = "Messages dead-lettered"
      doc         = "The toolkit dead-lettered messages (see the `reason` label). Inspect with `pubsub-toolkit dlq list`, fix the producer or the handler, then `pubsub-toolkit dlq replay`."
    }
    fingerprint_mismatch = {
      description = "A dedup key was reused with different content (dead-lettered, never dropped)."
      filter      = "${local.decision_filter} AND jsonPayload.alert=\"fingerprint_mismatch\""
      label       = "consumer"
      extractor   = "EXTRACT(jsonPayload.consumer)"
      threshold   = var.alert_thresholds.fingerprint_mismatches
      alert       = "Dedup key reused with different content"
      doc         = "A producer reused a dedup_key for a different payload. The second message is on the dead-letter topic with error_reason=fingerprint_mismatch; fix the producer's key scheme."
    }
    fifo_gap_timeout = {
      description = "A FIFO group waited longer than PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS for a missing number."
      filter      = "${local.decision_filter} AND jsonPayload.outcome=\"gap_timeout\""
      label       = "consumer"
      extractor   = "EXTRACT(jsonPayload.consumer)"
      threshold   = var.alert_thresholds.gap_timeouts
      alert       = "FIFO gap timeout"
      doc         = "A FIFO group is missing a sequence number (a publisher reserved it and never published). With PUBSUB_TOOLKIT_FIFO_GAP_POLICY=wait the group is stalled: `pubsub-toolkit status` shows it; `pubsub-toolkit fifo skip GROUP SEQ` passes over it."
    }
  }

  # Log-based metrics carry the monitored resource of their entries: functions (2nd gen) log as
  # cloud_run_revision, the relay as gae_app (or cloud_run_revision on Cloud Run). Alert filters
  # must restrict resource.type. `one_of` is valid filter syntax, and REDUCE_SUM never sums
  # across resource types (Aggregation.groupByFields: "It is not possible to reduce across
  # different resource types, so this field implicitly contains resource.type"): with the App
  # Engine relay a threshold applies to the functions' and the relay's counts separately.
  metric_resource_types = "resource.type = one_of(\"cloud_run_revision\", \"gae_app\", \"cloud_function\")"

  # Every alert notifies these: the given channels and the email channel made here.
  notification_channels = concat(var.notification_channels, google_monitoring_notification_channel.email[*].id)
  alert_prefix          = "${local.prefix}pubsub-toolkit"
}

resource "google_monitoring_notification_channel" "email" {
  count = var.alert_email == null ? 0 : 1

  project      = var.project_id
  display_name = "${local.alert_prefix} alerts"
  type         = "email"
  labels = {
    email_address = var.alert_email
  }
  user_labels = var.labels

  depends_on = [google_project_service.this]
}

# An alert nobody receives is a dashboard at best: warn (plan and apply go on).
check "alerts_notify_someone" {
  assert {
    condition     = length(var.notification_channels) > 0 || var.alert_email != null
    error_message = "No alert policy of pubsub-toolkit notifies anyone: set alert_email or notification_channels."
  }
}

resource "google_logging_metric" "this" {
  for_each = local.log_metrics

  project     = var.project_id
  name        = "${local.prefix}pubsub_toolkit/${each.key}"
  description = each.value.description
  filter      = each.value.filter

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
    labels {
      key         = each.value.label
      value_type  = "STRING"
      description = "From the decision log's ${each.value.label} field."
    }
  }

  label_extractors = {
    (each.value.label) = each.value.extractor
  }

  depends_on = [google_project_service.this]
}

# A policy on a log-based metric created in the same apply gets 404 "Cannot find metric(s) ...
# could take up to 10 minutes" (provider #11102): wait var.metric_propagation_wait first. If
# the first apply still fails there, run it again (the README says so).
resource "time_sleep" "log_metrics" {
  create_duration = var.metric_propagation_wait

  triggers = { for k, m in google_logging_metric.this : k => m.id }
}

resource "google_monitoring_alert_policy" "log_metric" {
  for_each = local.log_metrics

  project               = var.project_id
  display_name          = "${local.alert_prefix}: ${each.value.alert}"
  combiner              = "OR"
  notification_channels = local.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "${each.value.alert} (> ${each.value.threshold} in ${var.alert_thresholds.period})"
    condition_threshold {
      filter          = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.this[each.key].name}\" AND ${local.metric_resource_types}"
      comparison      = "COMPARISON_GT"
      threshold_value = each.value.threshold
      duration        = "0s"
      aggregations {
        alignment_period     = var.alert_thresholds.period
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.${each.value.label}"]
      }
      trigger {
        count = 1
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = each.value.doc
  }

  alert_strategy {
    auto_close = "86400s"
  }

  depends_on = [time_sleep.log_metrics]
}

# Dead-letter growth that no log line reports: Pub/Sub's own dead-letter policies forward
# messages (from any subscription) without the toolkit seeing them. The dead-letter
# subscription's backlog counts both kinds.
resource "google_monitoring_alert_policy" "dead_letter_backlog" {
  project               = var.project_id
  display_name          = "${local.alert_prefix}: dead-letter backlog"
  combiner              = "OR"
  notification_channels = local.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "Undelivered messages on ${google_pubsub_subscription.dead_letter.name} > ${var.alert_thresholds.dead_letter_backlog}"
    condition_threshold {
      filter          = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=\"${google_pubsub_subscription.dead_letter.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.dead_letter_backlog
      duration        = var.alert_thresholds.period
      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
      trigger {
        count = 1
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Messages are waiting on the dead-letter subscription. `pubsub-toolkit dlq list` shows reason, key, group and age; replay with `pubsub-toolkit dlq replay`."
  }

  alert_strategy {
    auto_close = "86400s"
  }

  depends_on = [google_project_service.this]
}

# A pull subscription nobody reads (or a consumer that stopped) keeps its messages for the
# retention period (7 days), silently: alert when the oldest unacked message is older than
# alert_thresholds.oldest_unacked_age (default a day).
resource "google_monitoring_alert_policy" "oldest_unacked" {
  for_each = google_pubsub_subscription.this

  project               = var.project_id
  display_name          = "${local.alert_prefix}: ${each.value.name} not read"
  combiner              = "OR"
  notification_channels = local.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "Oldest unacked message on ${each.value.name} older than ${var.alert_thresholds.oldest_unacked_age}s"
    condition_threshold {
      filter          = "metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=\"${each.value.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_thresholds.oldest_unacked_age
      duration        = var.alert_thresholds.period
      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
      trigger {
        count = 1
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Nobody has acknowledged a message on this subscription for longer than the threshold: its reader is down, or nobody reads it (then delete it, or pass subscriptions = {} to the module). Messages older than 7 days are lost."
  }

  alert_strategy {
    auto_close = "86400s"
  }

  depends_on = [google_project_service.this]
}
