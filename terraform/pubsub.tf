# Topics, subscriptions, and what Pub/Sub's own service agent needs to dead-letter.

resource "google_pubsub_topic" "this" {
  for_each = local.topics
  # Messages are encrypted at rest with Google-managed keys. A customer-managed key (kms_key_name)
  # needs a key ring and grants to the Pub/Sub service agent: an organisation's choice, not this
  # module's default.
  #checkov:skip=CKV_GCP_83:Google-managed encryption by default; CMEK is the organisation's choice

  project                    = var.project_id
  name                       = each.value
  message_retention_duration = var.message_retention_duration
  labels                     = var.labels

  depends_on = [google_project_service.this]
}

# Pull subscriptions for consumers (origin or final; by default final-sub, and only when no
# consumer function reads the final topic: main.tf). Every one has a dead-letter policy: a message
# that keeps failing leaves after max_delivery_attempts instead of looping for the retention
# period. The push subscriptions that deliver to the functions are in push.tf.
resource "google_pubsub_subscription" "this" {
  for_each = local.subscriptions

  project                      = var.project_id
  name                         = "${local.prefix}${each.key}"
  topic                        = google_pubsub_topic.this[each.value.topic].id
  ack_deadline_seconds         = each.value.ack_deadline_seconds
  enable_message_ordering      = each.value.enable_message_ordering
  enable_exactly_once_delivery = each.value.enable_exactly_once_delivery
  filter                       = each.value.filter
  message_retention_duration   = "604800s"
  labels                       = var.labels

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.this["dead_letter"].id
    max_delivery_attempts = each.value.max_delivery_attempts
  }

  retry_policy {
    minimum_backoff = each.value.minimum_backoff
    maximum_backoff = each.value.maximum_backoff
  }

  # An empty ttl: never delete the subscription for inactivity (the default is 31 days).
  expiration_policy {
    ttl = ""
  }
}

# The terminal subscription on the dead-letter topic, read by `pubsub-toolkit dlq list|replay`.
# Deliberately no dead_letter_policy: its only possible target would be the dead-letter topic
# itself (a loop), and `dlq list` releases what it reads (a nack), which Pub/Sub counts as a
# delivery attempt - a policy here would move dead letters away from operators after N listings.
# A static check of "a dead-letter policy on every subscription" must exempt this one by name.
resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "${local.prefix}${var.dead_letter_subscription}"
  topic                      = google_pubsub_topic.this["dead_letter"].id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  labels                     = var.labels

  # No retry_policy: listing releases every message with a nack, and a backoff would hide the
  # dead letters from the next `dlq list`, `dlq replay` or status page refresh for up to its
  # maximum. Without one, a released message is redelivered at once (the nacks cost nothing
  # here: this subscription has no dead-letter policy to count attempts against).
  expiration_policy {
    ttl = ""
  }
}


# Dead-lettering is done by Pub/Sub's service agent: it must publish to the dead-letter topic
# and subscribe to (ack on) every source subscription (the push ones: push.tf). The agent is
# created explicitly and waited for (identities.tf) before anything is granted to it.
resource "google_pubsub_topic_iam_member" "service_agent_dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.this["dead_letter"].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent

  depends_on = [time_sleep.service_identities]
}

resource "google_pubsub_subscription_iam_member" "service_agent_subscriber" {
  for_each = google_pubsub_subscription.this

  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent

  depends_on = [time_sleep.service_identities]
}
