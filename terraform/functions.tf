# 2nd-gen Cloud Functions from the bundles `make build` writes (library copied next to main.py),
# zipped here and uploaded to a private source bucket. Each object's name carries the bundle's
# hash, so a code change replaces the object and redeploys the function. They are HTTP functions
# (no Eventarc trigger): push subscriptions this module owns deliver to them (push.tf), with our
# own dead-letter and retry policies, and the functions decode the raw push body themselves.

locals {
  functions = merge(
    {
      ingress = {
        name          = "${local.prefix}${var.ingress.name}"
        description   = "pubsub-toolkit ingress: validate, dedup, publish now or schedule for later."
        entry_point   = "ingress"
        trigger_topic = "origin"
        account       = "ingress"
        memory        = var.ingress.memory
        cpu           = var.ingress.cpu
        timeout       = var.ingress.timeout_seconds
        min_instances = var.ingress.min_instances
        max_instances = var.ingress.max_instances
        concurrency   = var.ingress.concurrency
        env           = local.ingress_env
      }
    },
    var.consumer == null ? {} : {
      consumer = {
        name          = "${local.prefix}${var.consumer.name}"
        description   = "pubsub-toolkit consumer template: dedup + FIFO gate + PUBSUB_TOOLKIT_HANDLER."
        entry_point   = "consumer"
        trigger_topic = "final"
        account       = "consumer"
        memory        = var.consumer.memory
        cpu           = var.consumer.cpu
        timeout       = var.consumer.timeout_seconds
        min_instances = var.consumer.min_instances
        max_instances = var.consumer.max_instances
        concurrency   = var.consumer.concurrency
        env           = local.consumer_env
      }
    },
  )
}

resource "google_storage_bucket" "sources" {
  # Object names carry the bundle's hash and are never overwritten, and the bundles are rebuilt
  # from git by `make build`: versioning would only keep garbage. Reads are by Cloud Build and
  # App Engine only; Cloud Audit Logs record access, no usage-log bucket is needed.
  #checkov:skip=CKV_GCP_78:content-addressed build bundles, never overwritten; git is the history
  #checkov:skip=CKV_GCP_62:holds only build bundles; Cloud Audit Logs cover access
  project                     = var.project_id
  name                        = "${var.project_id}-${local.prefix}pubsub-toolkit-sources"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  labels                      = var.labels

  depends_on = [google_project_service.this]
}

data "archive_file" "function" {
  for_each = local.functions

  type        = "zip"
  source_dir  = "${local.build_dir}/functions/${each.key}"
  output_path = "${path.module}/.bundles/function-${each.key}.zip"
  excludes    = ["**/__pycache__/**", "**/*.pyc"]
}

resource "google_storage_bucket_object" "function" {
  for_each = local.functions

  bucket = google_storage_bucket.sources.name
  name   = "functions/${each.key}-${data.archive_file.function[each.key].output_md5}.zip"
  source = data.archive_file.function[each.key].output_path
}

resource "google_cloudfunctions2_function" "this" {
  for_each = local.functions

  project     = var.project_id
  location    = var.region
  name        = each.value.name
  description = each.value.description
  labels      = var.labels

  build_config {
    runtime         = var.function_runtime
    entry_point     = each.value.entry_point
    service_account = google_service_account.component["build"].id
    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.function[each.key].name
      }
    }
  }

  service_config {
    available_memory                 = each.value.memory
    available_cpu                    = each.value.cpu
    timeout_seconds                  = each.value.timeout
    min_instance_count               = each.value.min_instances
    max_instance_count               = each.value.max_instances
    max_instance_request_concurrency = each.value.concurrency
    # Pub/Sub push and Cloud Scheduler of this project calling the run.app URL are internal
    # traffic (Cloud Run docs); nothing else reaches the functions.
    ingress_settings               = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    service_account_email          = google_service_account.component[each.value.account].email
    environment_variables          = each.value.env

    # Optional VPC attachment (network.tf; Memorystore has only a private IP). Egress to private
    # ranges only: the Google APIs keep the default path.
    vpc_connector                 = local.vpc_connector
    vpc_connector_egress_settings = local.vpc_connector == null ? null : "PRIVATE_RANGES_ONLY"
    direct_vpc_egress             = local.direct_vpc == null ? null : "VPC_EGRESS_PRIVATE_RANGES_ONLY"
    dynamic "direct_vpc_network_interface" {
      for_each = local.direct_vpc == null ? [] : [local.direct_vpc]
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
        tags       = direct_vpc_network_interface.value.tags
      }
    }
  }

  # The build account's grants take time to propagate (the provider's own Cloud Functions
  # example waits the same way): a build started at once fails on missing permissions.
  depends_on = [
    google_project_service.this,
    time_sleep.build_iam,
  ]
}
