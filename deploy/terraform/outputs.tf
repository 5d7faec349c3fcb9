# What scripts/deploy-terraform reads after apply, and what producers and consumers need.

output "project_id" {
  description = "The project deployed into."
  value       = var.project_id
}

output "region" {
  description = "Region of the functions and their Eventarc triggers."
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
  description = "Deployed functions with their Eventarc triggers."
  value       = module.pubsub_toolkit.functions
}

output "relay_url" {
  description = "The relay's URL (OIDC audience of the tasks)."
  value       = module.pubsub_toolkit.relay_url
}

output "eventarc_max_delivery_attempts" {
  description = "Dead-letter attempts for the Eventarc subscriptions (set by scripts/deploy-terraform)."
  value       = var.eventarc_max_delivery_attempts
}
