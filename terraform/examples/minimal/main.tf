# The smallest useful deployment: topics, ingress, the delay queue and relay (App Engine, or Cloud
# Run with relay_platform = "cloud_run" and relay_image), Firestore TTL, alerts (to alert_email
# and/or notification_channels), final-sub for pubsub_toolkit.Consumer. Run `make build`
# in the repository first: the module zips build/.

module "pubsub_toolkit" {
  source = "../.."

  project_id             = var.project_id
  region                 = var.region
  app_engine_location_id = var.app_engine_location_id
  relay_platform         = var.relay_platform
  # Cloud Run relay: nothing here creates (default), so it must exist already.
  firestore_database_exists = var.relay_platform == "cloud_run"
  cloud_run_relay           = { image = var.relay_image }
  build_dir                 = "${path.module}/../../../build"
  notification_channels     = var.notification_channels
  alert_email               = var.alert_email
}
