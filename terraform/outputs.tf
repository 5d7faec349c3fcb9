output "topics" {
  description = "Topic ids (projects/P/topics/T) by role: origin, final, dead_letter."
  value       = { for k, t in google_pubsub_topic.this : k => t.id }
}

output "subscriptions" {
  description = "Consumer subscription ids by name, plus the terminal dead-letter subscription under `dead_letter`."
  value = merge(
    { for k, s in google_pubsub_subscription.this : k => s.id },
    { dead_letter = google_pubsub_subscription.dead_letter.id },
  )
}

output "service_accounts" {
  description = "Service account emails by component (ingress, relay, consumer, tasks-invoker, trigger, build)."
  value       = { for k, sa in google_service_account.component : k => sa.email }
}

output "tasks_queue" {
  description = "TASKS_QUEUE: the Cloud Tasks queue path, or null when delayed delivery is off."
  value       = local.tasks_queue_path
}

output "relay_url" {
  description = "RELAY_URL: the relay's base URL (also the OIDC audience), or null without HTTP targets."
  value       = local.oidc ? local.relay_url : null
}

output "functions" {
  description = "Deployed functions by key: name, Cloud Run service, and the Eventarc trigger (whose subscription needs its dead-letter policy set, see README.md)."
  value = { for k, f in google_cloudfunctions2_function.this : k => {
    name    = f.name
    service = f.service_config[0].service
    trigger = f.event_trigger[0].trigger
  } }
}

output "ingress_env" {
  description = "Environment of the ingress function, as rendered (the README's Configuration table)."
  value       = local.ingress_env
}

output "relay_env_variables" {
  description = "The relay's env_variables: with relay_deploy = \"gcloud\", paste them into app.yaml (with service_account set to service_accounts.relay) before `gcloud app deploy`."
  value       = local.delay ? local.relay_env : null
}

output "log_metrics" {
  description = "Log-based metric names by purpose (dead_lettered, fingerprint_mismatch, fifo_gap_timeout)."
  value       = { for k, m in google_logging_metric.this : k => m.name }
}

output "source_bucket" {
  description = "Bucket holding the zipped function and relay bundles."
  value       = google_storage_bucket.sources.name
}
