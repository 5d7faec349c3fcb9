# A second deploy into a project where a first one was destroyed. Destroy leaves the App Engine
# application (it can never be deleted; the provider only forgets it) and the Firestore database
# (the provider's deletion_policy ABANDON), and creating either again fails with 409; a deleted
# queue's name is reserved for up to 3 days (Cloud Tasks DeleteQueue), so
# `scripts/deploy-terraform --destroy` takes the queue out of the state first and keeps it.
# scripts/deploy-terraform looks each one up and sets the *_exists variables; these blocks then
# adopt them. Importing what the state already holds is a no-op, so they stay on every apply.

locals {
  creates_app_engine_application = var.enable_delayed_delivery && var.relay_platform == "app_engine" && var.create_app_engine_application
}

import {
  for_each = var.app_engine_application_exists && local.creates_app_engine_application ? toset([var.project_id]) : toset([])
  to       = module.pubsub_toolkit.google_app_engine_application.app[0]
  id       = each.value
}

import {
  for_each = var.firestore_database_exists && var.create_firestore_database ? toset(["projects/${var.project_id}/databases/(default)"]) : toset([])
  to       = module.pubsub_toolkit.google_firestore_database.this[0]
  id       = each.value
}

import {
  for_each = var.tasks_queue_exists && var.enable_delayed_delivery ? toset(["projects/${var.project_id}/locations/${var.region}/queues/${var.name_prefix}pubsub-toolkit-delay"]) : toset([])
  to       = module.pubsub_toolkit.google_cloud_tasks_queue.delay[0]
  id       = each.value
}
