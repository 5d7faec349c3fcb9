# The relay on App Engine standard (relay_platform = "app_engine", the default): Flask app behind
# gunicorn, called by Cloud Tasks at due time. Nothing here exists with relay_platform =
# "cloud_run" (cloudrun.tf). Why Terraform deploys the version (and when to use
# `gcloud app deploy` instead): README.md.

resource "google_app_engine_application" "app" {
  count = local.app_engine && var.create_app_engine_application ? 1 : 0

  project     = var.project_id
  location_id = var.app_engine_location_id
  # Without it App Engine may create a Datastore-mode (default) database, which the native
  # Firestore client cannot use, or race create_firestore_database for it (409).
  database_type = "CLOUD_FIRESTORE"

  depends_on = [google_project_service.this, google_firestore_database.this]

  # An App Engine application cannot be deleted and its location never changes; the provider's
  # destroy only forgets it (it stays in the project), so no prevent_destroy is needed.
  lifecycle {
    precondition {
      condition     = var.app_engine_location_id != null
      error_message = "app_engine_location_id is required when create_app_engine_application is true."
    }
    precondition {
      # (default) and the application share the project's default resource location (Firestore's
      # "Locations" page): App Engine europe-west goes with eur3, us-central with nam5, any other
      # location with the region of the same name. A (default) created elsewhere first leaves
      # the application nowhere to go.
      condition = !(var.create_firestore_database && var.firestore_database == "(default)") || var.firestore_location_id == lookup(
        { "europe-west" = "eur3", "us-central" = "nam5" },
        coalesce(var.app_engine_location_id, "-"), coalesce(var.app_engine_location_id, "-")
      )
      error_message = "firestore_location_id must match app_engine_location_id for (default): eur3 with europe-west, nam5 with us-central, else the same region (the project has one default resource location)."
    }
  }
}

locals {
  relay_by_terraform = local.app_engine && var.relay_deploy == "terraform"
}

data "archive_file" "relay" {
  count = local.relay_by_terraform ? 1 : 0

  type        = "zip"
  source_dir  = "${local.build_dir}/appengine/relay"
  output_path = "${path.module}/.bundles/appengine-relay.zip"
  excludes    = ["**/__pycache__/**", "**/*.pyc"]
}

resource "google_storage_bucket_object" "relay" {
  count = local.relay_by_terraform ? 1 : 0

  bucket = google_storage_bucket.sources.name
  name   = "appengine/relay-${data.archive_file.relay[0].output_md5}.zip"
  source = data.archive_file.relay[0].output_path
}

# Mirrors appengine/relay/app.yaml (runtime, entrypoint, scaling, handlers), with the
# environment rendered from this module instead of edited by hand.
resource "google_app_engine_standard_app_version" "relay" {
  count = local.relay_by_terraform ? 1 : 0

  project         = var.project_id
  service         = var.relay.service
  version_id      = "r-${substr(data.archive_file.relay[0].output_md5, 0, 10)}"
  runtime         = var.relay.runtime
  instance_class  = var.relay.instance_class
  service_account = google_service_account.component["relay"].email
  env_variables   = local.relay_env

  entrypoint {
    shell = var.relay.entrypoint
  }

  # network.tf: App Engine standard reaches a VPC (Memorystore) through a connector only.
  dynamic "vpc_access_connector" {
    for_each = local.vpc_connector == null ? [] : [local.vpc_connector]
    content {
      name           = vpc_access_connector.value
      egress_setting = "PRIVATE_IP_RANGES"
    }
  }

  deployment {
    zip {
      source_url = "https://storage.googleapis.com/${google_storage_bucket.sources.name}/${google_storage_bucket_object.relay[0].name}"
    }
  }

  automatic_scaling {
    max_concurrent_requests = var.relay.max_concurrent
    standard_scheduler_settings {
      min_instances = var.relay.min_instances
      max_instances = var.relay.max_instances
    }
  }

  handlers {
    url_regex      = "/.*"
    security_level = "SECURE_ALWAYS"
    script {
      script_path = "auto"
    }
  }

  # A version serving traffic cannot be deleted, and the `default` service never can: a new
  # bundle creates a new version, the split below moves traffic to it, old versions stay
  # (remove them with `gcloud app versions delete`; an app holds at most 210 versions).
  noop_on_destroy           = true
  delete_service_on_destroy = false

  # The build runs as the relay's account: its grants (iam.tf) must have propagated.
  depends_on = [
    google_app_engine_application.app,
    google_storage_bucket_iam_member.appengine_reads_sources,
    time_sleep.build_iam,
  ]
}

resource "google_app_engine_service_split_traffic" "relay" {
  count = local.relay_by_terraform ? 1 : 0

  project         = var.project_id
  service         = google_app_engine_standard_app_version.relay[0].service
  migrate_traffic = false

  split {
    shard_by = "IP"
    allocations = {
      (google_app_engine_standard_app_version.relay[0].version_id) = "1"
    }
  }
}
