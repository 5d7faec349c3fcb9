# The Cloud Tasks queue where due-later messages wait; each task calls the relay at its due time.

resource "google_cloud_tasks_queue" "delay" {
  count = local.delay ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = "${local.prefix}${var.tasks_queue_name}"

  retry_config {
    max_attempts       = var.tasks_retry.max_attempts
    min_backoff        = var.tasks_retry.min_backoff
    max_backoff        = var.tasks_retry.max_backoff
    max_doublings      = var.tasks_retry.max_doublings
    max_retry_duration = var.tasks_retry.max_retry_duration
  }

  rate_limits {
    max_dispatches_per_second = var.tasks_rate_limits.max_dispatches_per_second
    max_concurrent_dispatches = var.tasks_rate_limits.max_concurrent_dispatches
  }

  stackdriver_logging_config {
    sampling_ratio = var.tasks_logging_sampling_ratio
  }

  # HTTP targets: the queue enforces the OIDC identity and audience on every task, whatever the
  # creator put in it, so the relay's check (email = PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT, aud = PUBSUB_TOOLKIT_RELAY_URL)
  # holds even for a task created by hand.
  dynamic "http_target" {
    for_each = local.oidc ? [1] : []
    content {
      oidc_token {
        service_account_email = google_service_account.component["tasks-invoker"].email
        audience              = local.relay_audience
      }
    }
  }

  # App Engine targets: tasks go to the relay's service; App Engine adds X-AppEngine-QueueName.
  dynamic "app_engine_routing_override" {
    for_each = local.delay && !local.oidc ? [1] : []
    content {
      service = var.relay.service
    }
  }

  # The OIDC override names an account created in this apply: wait until it is known.
  depends_on = [google_project_service.this, time_sleep.service_identities]

  lifecycle {
    precondition {
      condition     = !local.oidc || local.relay_url != null
      error_message = "HTTP task targets need the relay's URL: set relay_url, or create_app_engine_application = true (or relay_platform = \"cloud_run\", whose URL is derived)."
    }
  }
}
