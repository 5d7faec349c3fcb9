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

  # The module's other inputs, unchanged (variables.tf).
  enable_apis                         = var.enable_apis
  topics                              = var.topics
  message_retention_duration          = var.message_retention_duration
  subscriptions                       = var.subscriptions
  exactly_once_delivery               = var.exactly_once_delivery
  ingress_message_ordering            = var.ingress_message_ordering
  push_max_delivery_attempts          = var.push_max_delivery_attempts
  grant_token_creator_to_pubsub_agent = var.grant_token_creator_to_pubsub_agent
  dead_letter_subscription            = var.dead_letter_subscription
  dedup_ttl_seconds                   = var.dedup_ttl_seconds
  dedup_collection                    = var.dedup_collection
  extra_ttl_collection_groups         = var.extra_ttl_collection_groups
  tasks_target                        = var.tasks_target
  tasks_retry                         = var.tasks_retry
  tasks_rate_limits                   = var.tasks_rate_limits
  tasks_logging_sampling_ratio        = var.tasks_logging_sampling_ratio
  relay_deploy                        = var.relay_deploy
  relay                               = var.relay
  function_runtime                    = var.function_runtime
  ingress                             = var.ingress
  metric_propagation_wait             = var.metric_propagation_wait
  alert_thresholds                    = var.alert_thresholds
  create_dashboard                    = var.create_dashboard
}
