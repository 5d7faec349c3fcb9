# One service account per component, each granted only what its code calls. No primitive
# roles (owner/editor/viewer) anywhere; resource-level bindings wherever the API has them.
#
#   ingress        publish final + dead-letter, Firestore records, create tasks (acting as invoker)
#   relay          publish final + dead-letter, Firestore records, create tasks for long-delay hops
#   consumer       publish dead-letter, Firestore records and FIFO state, create tasks for
#                  RetryLater (acting as invoker)                                  (optional)
#   tasks-invoker  the identity Cloud Tasks signs OIDC tokens as. On App Engine it holds no
#                  roles: the relay is a public URL that checks token email and audience. On
#                  Cloud Run it holds run.invoker on the relay's service only (cloudrun.tf)
#   push           the push subscriptions' OIDC identity: run.invoker on each function's service
#                  only (push.tf)
#   scheduler      Cloud Scheduler's OIDC identity for the consumer's sweep: run.invoker on the
#                  consumer's service only (scheduler.tf; only with the job)
#   build          Cloud Build identity for the functions' builds (and the Cloud Run relay's image)
# Redis mode: secretAccessor on the Redis secrets for the store's users (redis.tf).

locals {
  components = merge(
    {
      ingress = "pubsub-toolkit ingress function"
      push    = "pubsub-toolkit push subscriptions (invokes the functions)"
      build   = "pubsub-toolkit function builds"
    },
    local.sweep ? { scheduler = "pubsub-toolkit consumer sweep (Cloud Scheduler, invokes the consumer)" } : {},
    local.delay ? { relay = "pubsub-toolkit relay (${local.app_engine ? "App Engine" : "Cloud Run"})" } : {},
    local.oidc ? { "tasks-invoker" = "pubsub-toolkit Cloud Tasks OIDC invoker (PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT)" } : {},
    var.consumer == null ? {} : { consumer = "pubsub-toolkit consumer function" },
  )

  # Who publishes where (component => topic keys).
  publishers = merge(
    { ingress = ["final", "dead_letter"] },
    local.delay ? { relay = ["final", "dead_letter"] } : {},
    var.consumer == null ? {} : { consumer = ["dead_letter"] },
  )
  publisher_bindings = merge([
    for component, topics in local.publishers : {
      for topic in topics : "${component}/${topic}" => { component = component, topic = topic }
    }
  ]...)

  # Components that read and write Firestore (dedup records, FIFO state and counters).
  firestore_users = local.firestore ? setintersection(
    toset(["ingress", "relay", "consumer"]), toset(keys(local.components))
  ) : toset([])

  # Components that create Cloud Tasks tasks (the consumer: a handler's RetryLater re-schedules
  # a plain message through the delay path).
  enqueuers = local.delay ? setintersection(
    toset(["ingress", "relay", "consumer"]), toset(keys(local.components))
  ) : toset([])
}

resource "google_service_account" "component" {
  for_each = local.components

  project      = var.project_id
  account_id   = "${local.sa_prefix}${each.key}"
  display_name = each.value
  description  = "Managed by the pubsub-toolkit Terraform module."

  depends_on = [google_project_service.this]
}

resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = local.publisher_bindings

  project = var.project_id
  topic   = google_pubsub_topic.this[each.value.topic].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.component[each.value.component].member
}

# Firestore has no per-collection IAM; datastore.user is the narrowest role that reads and
# writes documents (no index or database administration).
resource "google_project_iam_member" "firestore_user" {
  for_each = local.firestore_users

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.component[each.key].member
}

resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = local.enqueuers

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.delay[0].name
  role     = "roles/cloudtasks.enqueuer"
  member   = google_service_account.component[each.key].member
}

# App Engine-routed tasks (tasks_target = "appengine"): creating one needs
# appengine.applications.get (Cloud Tasks v2 reference, CreateTask), which cloudtasks.enqueuer
# lacks; without it every delayed message is dead-lettered once the creator's retries run out.
# appViewer is the narrowest role holding it; App Engine has no per-application IAM.
resource "google_project_iam_member" "enqueuer_reads_app_engine" {
  for_each = local.delay && !local.oidc ? local.enqueuers : toset([])

  project = var.project_id
  role    = "roles/appengine.appViewer"
  member  = google_service_account.component[each.key].member
}

# Creating a task with an OIDC token for the invoker is "acting as" the invoker: the creator
# needs iam.serviceAccountUser on that one account, never on the project.
resource "google_service_account_iam_member" "act_as_invoker" {
  for_each = local.oidc ? local.enqueuers : toset([])

  service_account_id = google_service_account.component["tasks-invoker"].name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.component[each.key].member
}

# Function builds (Cloud Build with a user-managed account): write logs, push the image to
# Artifact Registry's gcf-artifacts repository (created by Cloud Functions, hence project
# level), read the source bucket.
resource "google_project_iam_member" "build" {
  for_each = toset(["roles/logging.logWriter", "roles/artifactregistry.writer"])

  project = var.project_id
  role    = each.value
  member  = google_service_account.component["build"].member
}

# Cloud Functions (2nd gen) copies the uploaded source into its own bucket
# gcf-v2-sources-PROJECT_NUMBER-REGION and the build fetches it from there as the build account
# (provider #20571: "Access to bucket gcf-v2-sources-... denied"). That bucket does not exist
# before the first deploy, so the grant is at project level, narrowed by a condition to it.
resource "google_project_iam_member" "build_reads_function_sources" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = google_service_account.component["build"].member

  condition {
    title       = "gcf-v2-sources-${var.region} only"
    description = "Cloud Functions' own copy of the uploaded function source, read by the build."
    expression  = "resource.name == \"${local.gcf_sources_bucket}\" || resource.name.startsWith(\"${local.gcf_sources_bucket}/\")"
  }
}

locals {
  gcf_sources_bucket = "projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-${var.region}"
}

resource "google_storage_bucket_iam_member" "build_reads_sources" {
  bucket = google_storage_bucket.sources.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.component["build"].member
}

# App Engine fetches the relay's zip from the source bucket when it creates the version.
resource "google_storage_bucket_iam_member" "appengine_reads_sources" {
  for_each = local.relay_by_terraform ? {
    relay         = google_service_account.component["relay"].member
    service_agent = local.app_engine_service_agent
  } : {}

  bucket = google_storage_bucket.sources.name
  role   = "roles/storage.objectViewer"
  member = each.value

  depends_on = [time_sleep.app_engine_service_agent]
}

# App Engine builds a version as the version's service account (the relay's), and organisations
# that disable automatic grants to default accounts leave it without the roles the build needs
# (provider #18936: "does not have access to the bucket staging.PROJECT.appspot.com"). What
# Google documents for a user-managed build identity, narrowly: read the app's staging bucket,
# write build logs, push the image (createOnPushWriter creates the repository on first push).
resource "google_project_iam_member" "relay_build" {
  for_each = local.app_engine ? toset(["roles/logging.logWriter", "roles/artifactregistry.createOnPushWriter"]) : toset([])

  project = var.project_id
  role    = each.value
  member  = google_service_account.component["relay"].member
}

resource "google_storage_bucket_iam_member" "relay_build_reads_staging" {
  for_each = local.app_engine ? toset(["staging"]) : toset([])

  # The application's code_bucket when created here, else App Engine's documented staging name.
  bucket = coalesce(one(google_app_engine_application.app[*].code_bucket), "staging.${var.project_id}.appspot.com")
  role   = "roles/storage.objectViewer"
  member = google_service_account.component["relay"].member
}
