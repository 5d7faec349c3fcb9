# pubsub-toolkit: origin topic -> ingress function -> final topic (now, or later through Cloud Tasks
# and the relay on App Engine or Cloud Run) -> consumers, with dedup records and FIFO state in
# Firestore (or Redis). Resources are split by concern: pubsub.tf push.tf firestore.tf tasks.tf
# functions.tf scheduler.tf appengine.tf cloudrun.tf network.tf iam.tf identities.tf
# monitoring.tf. This file holds what they share: names, the rendered environment, APIs.

locals {
  build_dir = coalesce(var.build_dir, "${path.module}/../build")

  # Every name the module gives starts with the prefix, so deployments can share a project.
  prefix    = var.name_prefix
  sa_prefix = coalesce(var.service_account_prefix, "ptk-${var.name_prefix}")
  # PUBSUB_TOOLKIT_STORE_PREFIX: the prefix with underscores ("blue-" -> "blue_"), in front of
  # every Firestore collection and Redis key prefix of the library's stores, so deployments
  # sharing a database or a Redis keep their FIFO counters, FIFO state and stats apart.
  store_prefix     = replace(var.name_prefix, "-", "_")
  dedup_collection = coalesce(var.dedup_collection, "${local.store_prefix}pubsub_toolkit_dedup")

  topics = {
    origin      = "${local.prefix}${var.topics.origin}"
    final       = "${local.prefix}${var.topics.final}"
    dead_letter = "${local.prefix}${var.topics.dead_letter}"
  }

  firestore = var.dedup_backend == "firestore"
  redis     = var.dedup_backend == "redis"

  delay = var.enable_delayed_delivery
  # OIDC only when tasks call the relay over HTTP; App Engine routing uses the queue header.
  oidc = local.delay && var.tasks_target == "http"
  # Exactly one platform hosts the relay; the other's resources are not created at all.
  app_engine = local.delay && var.relay_platform == "app_engine"
  cloud_run  = local.delay && var.relay_platform == "cloud_run"

  app_engine_hostname = one(google_app_engine_application.app[*].default_hostname)
  relay_host = local.app_engine_hostname == null ? null : (
    var.relay.service == "default"
    ? local.app_engine_hostname
    : "${var.relay.service}-dot-${local.app_engine_hostname}"
  )
  # Cloud Run's deterministic URL is known before the service exists (it needs only the name,
  # the project number and the region), so the queue's audience, ingress's PUBSUB_TOOLKIT_RELAY_URL and the
  # relay's own PUBSUB_TOOLKIT_RELAY_AUDIENCE are one value at plan time, without a dependency cycle through
  # the service's computed `uri`. cloudrun.tf checks after apply that the service really has it.
  cloud_run_url        = "https://${local.cloud_run_relay_name}-${data.google_project.this.number}.${var.region}.run.app"
  cloud_run_relay_name = "${local.prefix}${var.cloud_run_relay.name}"
  # PUBSUB_TOOLKIT_RELAY_URL, where the tasks are sent. On Cloud Run always the run.app URL: Cloud Tasks counts
  # as internal traffic on that URL only, so an internal-only relay behind a custom domain
  # would refuse every task; a relay_url (the custom domain) is then the tokens' audience alone.
  relay_url = local.cloud_run ? local.cloud_run_url : (
    var.relay_url != null ? trimsuffix(var.relay_url, "/") : (
      local.relay_host != null ? "https://${local.relay_host}" : null
    )
  )
  # PUBSUB_TOOLKIT_RELAY_AUDIENCE, the audience of every task's OIDC token (the queue enforces it).
  relay_audience = var.relay_url != null ? trimsuffix(var.relay_url, "/") : local.relay_url

  # Built from its parts rather than the queue's id so the value is known (and testable) at plan.
  tasks_queue_path = local.delay ? "projects/${var.project_id}/locations/${var.region}/queues/${google_cloud_tasks_queue.delay[0].name}" : null

  # Who reads the final topic: the consumer function (consumer-push) or, by default without it,
  # the pull subscription final-sub. An explicit map is the caller's choice.
  subscriptions = var.subscriptions != null ? var.subscriptions : var.consumer != null ? {} : {
    "final-sub" = {
      topic                        = "final"
      ack_deadline_seconds         = 60
      enable_message_ordering      = true
      enable_exactly_once_delivery = var.exactly_once_delivery
      max_delivery_attempts        = 10
      minimum_backoff              = "10s"
      maximum_backoff              = "600s"
      filter                       = null
    }
  }

  # Stats documents (one per ingress instance, for the status page) carry expire_at too, so
  # those of instances long gone are removed; so do the per-minute ones (the status page's
  # charts, collection group pubsub_toolkit_stats_minutes), 90 minutes after their minute.
  # Firestore only: TTL policies need a Firestore database (apply fails without one). The
  # groups are the library's names behind PUBSUB_TOOLKIT_STORE_PREFIX.
  ttl_collection_groups = !local.firestore ? {} : merge(
    {
      dedup         = local.dedup_collection
      stats         = "${local.store_prefix}pubsub_toolkit_stats"
      stats_minutes = "${local.store_prefix}pubsub_toolkit_stats_minutes"
      fifo_state    = "${local.store_prefix}pubsub_toolkit_fifo_state"
    },
    var.extra_ttl_collection_groups,
  )

  # Redis: Secret Manager secrets (ids or projects/P/secrets/ID) and the version names the
  # library resolves at start-up. The URL (with AUTH) never sits in an environment variable.
  redis_secrets = !local.redis || var.redis == null ? {} : {
    for purpose, secret in { url = var.redis.url_secret, ca_cert = var.redis.ca_cert_secret } :
    purpose => startswith(secret, "projects/") ? secret : "projects/${var.project_id}/secrets/${secret}"
    if secret != null
  }
  redis_env = merge(
    contains(keys(local.redis_secrets), "url") ? { PUBSUB_TOOLKIT_REDIS_URL_SECRET = "${local.redis_secrets.url}/versions/latest" } : {},
    contains(keys(local.redis_secrets), "ca_cert") ? { PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET = "${local.redis_secrets.ca_cert}/versions/latest" } : {},
  )

  # The README's Configuration table, rendered. Topic names are short; Settings.from_env expands
  # them with GOOGLE_CLOUD_PROJECT.
  common_env = merge(
    {
      GOOGLE_CLOUD_PROJECT              = var.project_id
      PUBSUB_TOOLKIT_FINAL_TOPIC        = google_pubsub_topic.this["final"].name
      PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC  = google_pubsub_topic.this["dead_letter"].name
      PUBSUB_TOOLKIT_STORE_BACKEND      = var.dedup_backend
      PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS  = tostring(var.dedup_ttl_seconds)
      PUBSUB_TOOLKIT_DEDUP_COLLECTION   = local.dedup_collection
      PUBSUB_TOOLKIT_FIRESTORE_DATABASE = var.firestore_database
    },
    # Unprefixed deployments render nothing new (their environment stays as it was).
    local.store_prefix == "" ? {} : { PUBSUB_TOOLKIT_STORE_PREFIX = local.store_prefix },
    local.redis_env,
  )

  delay_env = !local.delay ? {} : local.oidc ? {
    PUBSUB_TOOLKIT_TASKS_QUEUE           = local.tasks_queue_path
    PUBSUB_TOOLKIT_TASKS_TARGET          = "http"
    PUBSUB_TOOLKIT_RELAY_URL             = local.relay_url
    PUBSUB_TOOLKIT_RELAY_AUDIENCE        = local.relay_audience
    PUBSUB_TOOLKIT_RELAY_AUTH            = "oidc"
    PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT = google_service_account.component["tasks-invoker"].email
    } : {
    PUBSUB_TOOLKIT_TASKS_QUEUE   = local.tasks_queue_path
    PUBSUB_TOOLKIT_TASKS_TARGET  = "appengine"
    PUBSUB_TOOLKIT_RELAY_SERVICE = var.relay.service
    PUBSUB_TOOLKIT_RELAY_AUTH    = "appengine"
  }

  ingress_env = merge(local.common_env, local.delay_env, {
    PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS = tostring(var.ingress.publish_timeout)
    PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS     = tostring(var.ingress.lease_seconds)
  }, var.ingress.extra_env)

  # The relay must know the queue's retry budget: on the last attempt it dead-letters a message
  # it still cannot release instead of answering 503 and letting the queue drop the task.
  relay_env = merge(local.common_env, local.delay_env, {
    PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS = tostring(var.tasks_retry.max_attempts)
  })

  # delay_env: RetryLater re-schedules a plain message through the delay path.
  consumer_env = var.consumer == null ? {} : merge(local.common_env, local.delay_env, {
    PUBSUB_TOOLKIT_CONSUMER_ID = var.consumer.consumer_id
    PUBSUB_TOOLKIT_HANDLER     = var.consumer.handler
  }, var.consumer.extra_env)

  # cloudresourcemanager (the project lookup, IAM bindings) and serviceusage (enabling the rest,
  # the service identities) must be on before anything else works on a fresh project.
  apis = toset(concat(
    [
      "artifactregistry.googleapis.com",
      "cloudbuild.googleapis.com",
      "cloudfunctions.googleapis.com",
      "cloudresourcemanager.googleapis.com",
      "firestore.googleapis.com",
      "iam.googleapis.com",
      "logging.googleapis.com",
      "monitoring.googleapis.com",
      "pubsub.googleapis.com",
      "run.googleapis.com",
      "serviceusage.googleapis.com",
      "storage.googleapis.com",
    ],
    local.delay ? ["cloudtasks.googleapis.com"] : [],
    local.app_engine ? ["appengine.googleapis.com"] : [],
    local.sweep ? ["cloudscheduler.googleapis.com"] : [],
    local.redis ? ["secretmanager.googleapis.com"] : [],
  ))
}

data "google_project" "this" {
  project_id = var.project_id
}

resource "google_project_service" "this" {
  for_each = var.enable_apis ? local.apis : toset([])

  project = var.project_id
  service = each.value
  # Other workloads in the project may use the same APIs: never switch them off on destroy.
  disable_on_destroy = false
}
