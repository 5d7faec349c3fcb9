# The push subscriptions that deliver to the functions: ${prefix}ingress-push on the origin topic
# and ${prefix}consumer-push on the final topic (when the consumer is deployed). They replace the
# Eventarc triggers, whose Eventarc-owned subscriptions had no dead-letter policy (poison
# messages were dropped after the subscription's 24-hour retention) and could only be patched
# after every deploy. Owned here, they carry everything: an OIDC token of the push account for
# the function's run.app URL (Cloud Run's IAM check verifies it), our dead-letter and retry
# policies, ordering for the consumer. The functions read the raw push body
# ({"message": {...}, "subscription": ...}).

locals {
  # The OIDC audience is the bare run.app URL, which Cloud Run accepts for the service.
  function_urls = { for k, f in google_cloudfunctions2_function.this : k => f.service_config[0].uri }
}

resource "google_pubsub_subscription" "push" {
  for_each = local.functions

  project = var.project_id
  name    = "${local.prefix}${each.key}-push"
  topic   = google_pubsub_topic.this[each.value.trigger_topic].id
  # A delivery is outstanding while the function runs: its timeout is the ack deadline.
  ack_deadline_seconds = each.value.timeout
  # The consumer's FIFO gate works either way (its own counters); ordered delivery per
  # fifo_group makes in-order arrival the common case. Ingress: the operator's choice
  # (var.ingress_message_ordering: fewer parked arrivals against one push per group at a time).
  enable_message_ordering    = each.key == "consumer" || (each.key == "ingress" && var.ingress_message_ordering)
  message_retention_duration = "604800s"
  labels                     = var.labels

  push_config {
    push_endpoint = local.function_urls[each.key]
    oidc_token {
      service_account_email = google_service_account.component["push"].email
      audience              = local.function_urls[each.key]
    }
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.this["dead_letter"].id
    max_delivery_attempts = var.push_max_delivery_attempts
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  # An empty ttl: never delete the subscription for inactivity (the default is 31 days).
  expiration_policy {
    ttl = ""
  }

  # Pushes start as soon as the subscription exists: the push account must already be allowed
  # to invoke the function, and (old projects) the agent to mint its tokens.
  depends_on = [
    google_cloud_run_v2_service_iam_member.push_invokes_function,
    google_service_account_iam_member.pubsub_agent_token_creator,
  ]
}

# The push account may invoke exactly these functions (a 2nd-gen function is a Cloud Run
# service, so the role is run.invoker on that service).
resource "google_cloud_run_v2_service_iam_member" "push_invokes_function" {
  for_each = google_cloudfunctions2_function.this

  project  = var.project_id
  location = var.region
  name     = each.value.service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.component["push"].member
}

# Pub/Sub signs the push's OIDC token as the push account. A Pub/Sub service agent created on or
# before 8 April 2021 needs the token creator role for that (Google's push authentication docs);
# harmless otherwise. On the push account only, never on the project.
resource "google_service_account_iam_member" "pubsub_agent_token_creator" {
  count = var.grant_token_creator_to_pubsub_agent ? 1 : 0

  service_account_id = google_service_account.component["push"].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent

  depends_on = [time_sleep.service_identities]
}

# The agent acks what it dead-letters from each push subscription.
resource "google_pubsub_subscription_iam_member" "service_agent_push_subscriber" {
  for_each = google_pubsub_subscription.push

  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent

  depends_on = [time_sleep.service_identities]
}
