# The deploy root `make deploy` (scripts/deploy-terraform) applies: the module in ../../terraform
# with the bundles from ../../build, configured by deploy/terraform.tfvars (see the .example).
# State lives in GCS (versions.tf: backend "gcs", configured by backend.hcl - see the .example).

module "pubsub_toolkit" {
  source = "../../terraform"

  project_id                    = var.project_id
  region                        = var.region
  app_engine_location_id        = var.app_engine_location_id
  create_app_engine_application = var.create_app_engine_application
  relay_url                     = var.relay_url
  create_firestore_database     = var.create_firestore_database
  firestore_location_id         = var.firestore_location_id
  firestore_database_exists     = var.firestore_database_exists
  enable_delayed_delivery       = var.enable_delayed_delivery
  relay_platform                = var.relay_platform
  # The image scripts/deploy-terraform built (relay_image) wins over one set in the tfvars.
  cloud_run_relay       = merge(var.cloud_run_relay, var.relay_image == null ? {} : { image = var.relay_image })
  consumer              = var.consumer
  notification_channels = var.notification_channels
  alert_email           = var.alert_email
  labels                = var.labels
  # Several deployments per project: every name prefixed (service accounts: ptk-<prefix>...).
  name_prefix            = var.name_prefix
  service_account_prefix = var.service_account_prefix
  # Redis (Memorystore): the URL and CA come from Secret Manager, over a VPC network attachment.
  dedup_backend = var.dedup_backend
  redis         = var.redis
  network       = var.network
  build_dir     = coalesce(var.build_dir, "${path.module}/../../build")
}
