# Google's service agents and the waits Google documents propagation delays for. On a fresh
# project an agent appears some time after its API is enabled, and IAM grants take time to
# reach every service: the first apply otherwise fails ("Permission denied while using the
# ... Service Agent", a build without its permissions). terraform-google-modules style: create
# the agent explicitly (google_project_service_identity, google-beta only), wait, then grant.

locals {
  # Built from the project number rather than the identity's `email`, so the member is known at
  # plan (and in tests); the identity resource below makes sure the account exists.
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  # App Engine's agent exists once the application does (it is not a generateServiceIdentity
  # service): the wait below follows the application instead.
  app_engine_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-gae-service.iam.gserviceaccount.com"
}

resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.this]
}

# Everything granted to (or pushing as) a service agent waits for this, and so does the queue
# whose OIDC override names the tasks-invoker account: service account creation is eventually
# consistent (the provider's google_service_account documentation), and Cloud Tasks checks the
# account when the queue is created. Triggered by both, so it adds no time of its own.
resource "time_sleep" "service_identities" {
  create_duration = "60s"

  triggers = merge(
    { pubsub = google_project_service_identity.pubsub.id },
    local.oidc ? { tasks_invoker = google_service_account.component["tasks-invoker"].unique_id } : {},
  )
}

# The App Engine service agent fetches the relay's zip: grant it only once the application (and
# so its agent) exists, and give that a minute as for the other agents. An application that
# existed before (create_app_engine_application = false) has its agent already.
resource "time_sleep" "app_engine_service_agent" {
  count = length(google_app_engine_application.app)

  create_duration = "60s"

  triggers = {
    application = google_app_engine_application.app[0].id
  }

  depends_on = [google_app_engine_application.app]
}

# The builds' grants (functions: the build account; App Engine: the relay's own account, which
# its builds run as) must have propagated before a build starts, or it fails on permissions.
resource "time_sleep" "build_iam" {
  create_duration = "60s"

  triggers = merge(
    { for role, m in google_project_iam_member.build : role => m.id },
    { sources = google_storage_bucket_iam_member.build_reads_sources.id },
    { gcf_sources = google_project_iam_member.build_reads_function_sources.id },
    { for k, m in google_storage_bucket_iam_member.build_uses_builds_bucket : "builds bucket" => m.id },
    { for role, m in google_project_iam_member.relay_build : "relay ${role}" => m.id },
    { for k, m in google_storage_bucket_iam_member.relay_build_reads_staging : "relay staging" => m.id },
  )
}
