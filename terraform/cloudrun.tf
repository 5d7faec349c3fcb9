# The relay on Cloud Run (relay_platform = "cloud_run"): the same Flask app as on App Engine, in a
# container built from build/appengine/relay with its Dockerfile, called by Cloud Tasks at due
# time. Nothing here exists with relay_platform = "app_engine" (appengine.tf).
#
# Who may call it, three layers deep:
#   1. network: ingress INTERNAL_ONLY by default - Cloud Tasks of this project counts as internal,
#      the internet does not reach the service at all;
#   2. Cloud Run's IAM invoker check: only tasks-invoker holds run.invoker on the service (below),
#      so Cloud Run verifies the task's OIDC token (signature, expiry, audience = the service's
#      URL or its custom audience) and the invoker's permission before the container sees it;
#   3. the relay's own check, as on App Engine: issuer, audience = PUBSUB_TOOLKIT_RELAY_AUDIENCE, email =
#      PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT (verified), expiry. Cloud Run replaces the signature of a token it
#      has verified with SIGNATURE_REMOVED_BY_GOOGLE before forwarding it, so the Cloud Run entry
#      point (appengine/relay/cloud_run.py, PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM) checks those claims of a
#      stripped token and still verifies the signature of any token that arrives signed.

locals {
  cloud_run_relay = local.cloud_run ? 1 : 0

  # What the relay reads, as on App Engine, plus the one Cloud Run setting: a token whose
  # signature Cloud Run stripped may be trusted for its signature, because the invoker IAM
  # check above is always on for this service (invoker_iam_disabled = false).
  cloud_run_env = merge(local.relay_env, { PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM = "true" })
}

resource "google_cloud_run_v2_service" "relay" {
  count = local.cloud_run_relay

  project     = var.project_id
  location    = var.region
  name        = local.cloud_run_relay_name
  description = "pubsub-toolkit relay: Cloud Tasks calls POST /release at each delayed message's due time."
  labels      = var.labels
  ingress     = var.cloud_run_relay.ingress
  # Never let an edit open the relay to unauthenticated callers: Cloud Run checks run.invoker.
  invoker_iam_disabled = false
  # A custom domain in var.relay_url is what Cloud Tasks puts in the token's audience (the tasks
  # still call the run.app URL, main.tf); Cloud Run accepts its own run.app URLs anyway.
  custom_audiences = var.relay_url == null ? null : [local.relay_audience]
  # The relay is stateless (its records live in Firestore or Redis): destroy it like the
  # functions. Tasks due while it is missing are retried by the queue (tasks_retry).
  deletion_protection = var.cloud_run_relay.deletion_protection

  template {
    service_account                  = google_service_account.component["relay"].email
    max_instance_request_concurrency = var.cloud_run_relay.concurrency
    timeout                          = "${var.cloud_run_relay.timeout_seconds}s"
    labels                           = var.labels

    scaling {
      min_instance_count = var.cloud_run_relay.min_instances
      max_instance_count = var.cloud_run_relay.max_instances
    }

    # network.tf: a connector or Direct VPC egress, to private ranges only.
    dynamic "vpc_access" {
      for_each = var.network == null ? [] : [var.network]
      content {
        connector = local.vpc_connector
        egress    = "PRIVATE_RANGES_ONLY"
        dynamic "network_interfaces" {
          for_each = local.direct_vpc == null ? [] : [local.direct_vpc]
          content {
            network    = network_interfaces.value.network
            subnetwork = network_interfaces.value.subnetwork
            tags       = network_interfaces.value.tags
          }
        }
      }
    }

    containers {
      image = var.cloud_run_relay.image

      resources {
        limits = {
          cpu    = var.cloud_run_relay.cpu
          memory = var.cloud_run_relay.memory
        }
      }

      dynamic "env" {
        for_each = local.cloud_run_env
        content {
          name  = env.key
          value = env.value
        }
      }

      # A revision whose app cannot start (a wrong setting makes create_app raise) never gets
      # traffic: the previous revision keeps serving and the apply fails with the reason.
      startup_probe {
        http_get {
          path = "/healthz"
        }
        period_seconds    = 3
        failure_threshold = 20
      }
    }
  }

  traffic {
    type    = "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST"
    percent = 100
  }

  depends_on = [google_project_service.this]

  lifecycle {
    precondition {
      condition     = var.cloud_run_relay.image != null
      error_message = "relay_platform = \"cloud_run\" needs cloud_run_relay.image: build it from build/appengine/relay (scripts/deploy-terraform does, or gcloud builds submit build/appengine/relay --tag=IMAGE)."
    }
    precondition {
      # App Engine's X-AppEngine-QueueName header proves nothing off App Engine: anyone who
      # reaches the service could send it. Cloud Run needs HTTP targets with OIDC tokens.
      condition     = var.tasks_target == "http"
      error_message = "relay_platform = \"cloud_run\" needs tasks_target = \"http\" (App Engine routing and its queue header exist only on App Engine)."
    }
    precondition {
      condition     = var.relay_deploy == "terraform"
      error_message = "relay_deploy = \"gcloud\" is App Engine's `gcloud app deploy`; on Cloud Run this module deploys cloud_run_relay.image (or use scripts/deploy-gcloud with RELAY_PLATFORM=cloud_run)."
    }
    postcondition {
      # Every task is sent to the deterministic URL fixed at plan: if Cloud Run did not assign it
      # (a name too long for one DNS label), no task would reach the relay.
      condition     = contains(self.urls, local.relay_url)
      error_message = "The Cloud Run service has no URL ${local.relay_url} (its URLs: ${join(", ", self.urls)}): shorten name_prefix or cloud_run_relay.name."
    }
  }
}

# Cloud Tasks signs its OIDC tokens as tasks-invoker: that account, and no other, may invoke the
# relay. (Deployers with project-wide Cloud Run roles can too, as they can redeploy it anyway.)
resource "google_cloud_run_v2_service_iam_member" "tasks_invoker_invokes_relay" {
  count = local.cloud_run_relay * (local.oidc ? 1 : 0)

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.relay[0].name
  role     = "roles/run.invoker"
  member   = google_service_account.component["tasks-invoker"].member
}

# The relay's image is built by scripts/deploy-terraform with Cloud Build as the deployment's own
# build account (Cloud Build's default account has no roles, or does not exist, on new projects
# and in organisations without default grants). A user-specified build account must keep its
# logs in Cloud Logging or in a bucket of the user's: this regional one holds the build logs and
# the uploaded source (`gcloud builds submit --gcs-log-dir/--gcs-source-staging-dir`).
resource "google_storage_bucket" "builds" {
  #checkov:skip=CKV_GCP_78:build logs and staged sources, deleted after 30 days
  #checkov:skip=CKV_GCP_62:holds only build logs and staged sources; Cloud Audit Logs cover access
  count = local.cloud_run_relay

  project                     = var.project_id
  name                        = "${var.project_id}-${local.prefix}pubsub-toolkit-builds"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  labels                      = var.labels

  lifecycle_rule {
    condition {
      age = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.this]
}

# The build reads the staged source and writes its log there (this bucket only).
resource "google_storage_bucket_iam_member" "build_uses_builds_bucket" {
  count = local.cloud_run_relay

  bucket = google_storage_bucket.builds[0].name
  role   = "roles/storage.objectAdmin"
  member = google_service_account.component["build"].member
}
