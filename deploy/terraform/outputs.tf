# What producers and consumers need after apply.

output "project_id" {
  description = "The project deployed into."
  value       = var.project_id
}

output "region" {
  description = "Region of the functions, the queue and the scheduler job."
  value       = var.region
}

output "topics" {
  description = "Topic ids by role: publish to origin, consume final, inspect dead_letter."
  value       = module.pubsub_toolkit.topics
}

output "subscriptions" {
  description = "Subscription ids (final-sub for pubsub_toolkit.Consumer, dead_letter for `pubsub-toolkit dlq`)."
  value       = module.pubsub_toolkit.subscriptions
}

output "functions" {
  description = "Deployed functions (HTTP, each behind a push subscription the module owns)."
  value       = module.pubsub_toolkit.functions
}

output "relay_url" {
  description = "The relay's URL (OIDC audience of the tasks)."
  value       = module.pubsub_toolkit.relay_url
}

output "producer_env" {
  description = "Environment of a producer in your application (the Publisher and its sequence counter): the deployment's store backend and PUBSUB_TOOLKIT_STORE_PREFIX (name_prefix with underscores), so its FIFO numbers are the ones the consumers wait on."
  value       = module.pubsub_toolkit.producer_env
}
