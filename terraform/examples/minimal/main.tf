# The smallest useful deployment: topics, ingress, the delay queue and relay, Firestore TTL,
# alerts. Run `make build` in the repository first: the module zips build/.

module "pubsub_toolkit" {
  source = "../.."

  project_id             = var.project_id
  region                 = var.region
  app_engine_location_id = var.app_engine_location_id
  build_dir              = "${path.module}/../../../build"
  notification_channels  = var.notification_channels
}
