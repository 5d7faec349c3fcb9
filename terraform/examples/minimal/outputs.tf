output "origin_topic" {
  description = "Publish here."
  value       = module.pubsub_toolkit.topics["origin"]
}

output "final_subscription" {
  description = "Consume from here (pubsub_toolkit.Consumer)."
  value       = module.pubsub_toolkit.subscriptions["final-sub"]
}

output "relay_url" {
  description = "The relay's URL, also the OIDC audience of the tasks."
  value       = module.pubsub_toolkit.relay_url
}
