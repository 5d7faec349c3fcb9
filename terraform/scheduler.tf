# The consumer's sweep on Cloud Scheduler: parked messages and FIFO gap timeouts are handled
# when an event arrives, or when this job POSTs to the consumer's /sweep - without it a quiet
# group would wait for its next message. Only when the consumer is deployed and
# consumer.sweep_schedule is set (default every minute).

locals {
  sweep = var.consumer == null ? false : (var.consumer.sweep_schedule == null ? false : var.consumer.sweep_schedule != "")
}

resource "google_cloud_scheduler_job" "sweep" {
  count = local.sweep ? 1 : 0

  project     = var.project_id
  region      = var.region
  name        = "${local.prefix}consumer-sweep"
  description = "pubsub-toolkit: the consumer's sweep (parked messages, FIFO gap timeouts)."
  schedule    = var.consumer.sweep_schedule
  time_zone   = "Etc/UTC"
  # The consumer answers within its timeout; a longer sweep would be cut off there anyway.
  attempt_deadline = "${var.consumer.timeout_seconds}s"

  http_target {
    http_method = "POST"
    uri         = "${local.function_urls["consumer"]}/sweep"
    oidc_token {
      service_account_email = google_service_account.component["scheduler"].email
      # The bare run.app URL, as for the push subscription: Cloud Run accepts it for any path.
      audience = local.function_urls["consumer"]
    }
  }

  # The next minute's run is the retry: no backoff queue of sweeps.
  retry_config {
    retry_count = 0
  }

  depends_on = [
    google_project_service.this,
    google_cloud_run_v2_service_iam_member.scheduler_invokes_consumer,
  ]
}

# The scheduler account may invoke the consumer's service, and nothing else.
resource "google_cloud_run_v2_service_iam_member" "scheduler_invokes_consumer" {
  count = local.sweep ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this["consumer"].service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.component["scheduler"].member
}
