output "topics" {
  description = "Topic ids (projects/P/topics/T) by role: origin, final, dead_letter."
  value       = { for k, t in google_pubsub_topic.this : k => t.id }
}

output "subscriptions" {
  description = "Pull subscription ids by their key in var.subscriptions (final-sub by default without the consumer function; names carry name_prefix), plus the terminal dead-letter subscription under `dead_letter`."
  value = merge(
    { for k, s in google_pubsub_subscription.this : k => s.id },
    { dead_letter = google_pubsub_subscription.dead_letter.id },
  )
}

output "service_accounts" {
  description = "Service account emails by component (ingress, relay, consumer, tasks-invoker, push, scheduler, build)."
  value       = { for k, sa in google_service_account.component : k => sa.email }
}

output "tasks_queue" {
  description = "PUBSUB_TOOLKIT_TASKS_QUEUE: the Cloud Tasks queue path, or null when delayed delivery is off."
  value       = local.tasks_queue_path
}

output "relay_url" {
  description = "PUBSUB_TOOLKIT_RELAY_URL: the relay's base URL (also the OIDC audience), or null without HTTP targets."
  value       = local.oidc ? local.relay_url : null
}

output "functions" {
  description = "Deployed functions by key (ingress, consumer): name, Cloud Run service, run.app uri, and the id of the push subscription that delivers to it."
  value = { for k, f in google_cloudfunctions2_function.this : k => {
    name              = f.name
    service           = f.service_config[0].service
    uri               = f.service_config[0].uri
    push_subscription = google_pubsub_subscription.push[k].id
  } }
}

output "push_subscriptions" {
  description = "Push subscription ids by function key (ingress-push, consumer-push), each with its OIDC token, dead-letter and retry policy."
  value       = { for k, s in google_pubsub_subscription.push : k => s.id }
}

output "sweep_job" {
  description = "The Cloud Scheduler job calling the consumer's /sweep (its id), or null without one."
  value       = one(google_cloud_scheduler_job.sweep[*].id)
}

output "notification_channels" {
  description = "The notification channels every alert policy notifies (notification_channels plus alert_email's channel)."
  value       = local.notification_channels
}

output "name_prefix" {
  description = "The name prefix of this deployment's resources."
  value       = var.name_prefix
}

output "ingress_env" {
  description = "Environment of the ingress function, as rendered (the README's Configuration table)."
  value       = local.ingress_env
}

output "producer_env" {
  description = "Environment of a producer in your application (the Publisher and its sequence counter, Settings.from_env): the deployment's store backend, database, Redis secrets and PUBSUB_TOOLKIT_STORE_PREFIX, so its FIFO numbers are the ones this deployment's consumers wait on. Publish to topics.origin."
  value       = local.common_env
}

output "relay_env_variables" {
  description = "The relay's environment: on App Engine with relay_deploy = \"gcloud\", paste it into app.yaml's env_variables (with service_account set to service_accounts.relay) before `gcloud app deploy`. On Cloud Run the service gets it plus PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM."
  value       = local.delay ? (local.cloud_run ? local.cloud_run_env : local.relay_env) : null
}

output "relay_platform" {
  description = "Where the relay runs: app_engine or cloud_run (null when delayed delivery is off)."
  value       = local.delay ? var.relay_platform : null
}

output "relay_service" {
  description = "The relay's Cloud Run service (name, URLs Cloud Run assigned) with relay_platform = \"cloud_run\", else null."
  value = one([for s in google_cloud_run_v2_service.relay : {
    name = s.name
    urls = s.urls
  }])
}

output "log_metrics" {
  description = "Log-based metric names by purpose (dead_lettered, fingerprint_mismatch, fifo_gap_timeout)."
  value       = { for k, m in google_logging_metric.this : k => m.name }
}

output "source_bucket" {
  description = "Bucket holding the zipped function and relay bundles."
  value       = google_storage_bucket.sources.name
}

output "dashboard" {
  description = "The Cloud Monitoring dashboard's id (projects/P/dashboards/ID), or null with create_dashboard = false."
  value       = one(google_monitoring_dashboard.this[*].id)
}
