# Inputs of the pubsub-toolkit module. Names of environment variables the deployed parts read
# are the README's Configuration table; this module renders them from these inputs.

# ---------------------------------------------------------------------------------------------
# Project and placement
# ---------------------------------------------------------------------------------------------

variable "project_id" {
  type        = string
  description = "Project that holds the topics, Firestore, the queue, the functions and the relay (App Engine or Cloud Run)."
}

variable "region" {
  type        = string
  description = "Region of the Cloud Functions, the Cloud Tasks queue and the source bucket (e.g. europe-west1)."
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource that takes labels."
  default     = {}
}

variable "service_account_prefix" {
  type        = string
  description = "Prefix of the service account ids this module creates (one per component); ids are 6-30 characters."
  default     = "ptk-"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,12}$", var.service_account_prefix))
    error_message = "service_account_prefix must be lowercase letters, digits and dashes, at most 13 characters, starting with a letter."
  }
}

variable "enable_apis" {
  type        = bool
  description = "Enable the Google APIs the module needs (never disabled on destroy). Set false when the project factory already does it."
  default     = true
}

# ---------------------------------------------------------------------------------------------
# Pub/Sub
# ---------------------------------------------------------------------------------------------

variable "topics" {
  type = object({
    origin      = optional(string, "origin")
    final       = optional(string, "final")
    dead_letter = optional(string, "dead-letter")
  })
  description = "Topic names: producers publish to origin, consumers read final, invalid and poison messages land on dead_letter."
  default     = {}
}

variable "message_retention_duration" {
  type        = string
  description = "How long each topic retains messages (seek/replay window), at most 31 days. Keep DEDUP_TTL_SECONDS above the subscriptions' retention."
  default     = "604800s"
}

variable "subscriptions" {
  type = map(object({
    topic                   = optional(string, "final")
    ack_deadline_seconds    = optional(number, 60)
    enable_message_ordering = optional(bool, false)
    max_delivery_attempts   = optional(number, 10)
    minimum_backoff         = optional(string, "10s")
    maximum_backoff         = optional(string, "600s")
    filter                  = optional(string)
  }))
  description = <<-EOT
    Pull subscriptions for consumers, keyed by subscription name. `topic` is a key of var.topics
    (origin, final). Every one gets a dead-letter policy and a retry policy. The final topic's
    subscription enables message ordering (fifo_group is the ordering key); the toolkit's own
    counters still enforce FIFO, ordering only makes in-order arrival the common case.
  EOT
  default = {
    "final-sub" = {
      topic                   = "final"
      enable_message_ordering = true
    }
  }

  validation {
    condition     = alltrue([for s in values(var.subscriptions) : contains(["origin", "final"], s.topic)])
    error_message = "Each subscription's topic must be \"origin\" or \"final\" (the dead-letter topic has its own terminal subscription)."
  }

  validation {
    condition     = alltrue([for s in values(var.subscriptions) : s.max_delivery_attempts >= 5 && s.max_delivery_attempts <= 100])
    error_message = "max_delivery_attempts must be between 5 and 100 (Pub/Sub's limits)."
  }
}

variable "dead_letter_subscription" {
  type        = string
  description = "Name of the pull subscription on the dead-letter topic that `pubsub-toolkit dlq list|replay` reads."
  default     = "dead-letter-sub"
}

# ---------------------------------------------------------------------------------------------
# Dedup and FIFO stores
# ---------------------------------------------------------------------------------------------

variable "dedup_backend" {
  type        = string
  description = "DEDUP_BACKEND of the deployed parts: firestore, or redis (then set redis_url)."
  default     = "firestore"

  validation {
    condition     = contains(["firestore", "redis"], var.dedup_backend)
    error_message = "dedup_backend must be firestore or redis (memory is for a single local process only)."
  }
}

variable "redis_url" {
  type        = string
  description = "REDIS_URL (redis://host:port/db of a Memorystore instance) when dedup_backend is redis. The VPC connector is not managed here."
  default     = null
}

variable "dedup_ttl_seconds" {
  type        = number
  description = "DEDUP_TTL_SECONDS: lifetime of a dedup record. Must exceed the redelivery window (7 days of retention), hence 8 days."
  default     = 691200

  validation {
    condition     = var.dedup_ttl_seconds > 604800
    error_message = "dedup_ttl_seconds must exceed 604800 (7 days, Pub/Sub's maximum unacked retention)."
  }
}

variable "firestore_database" {
  type        = string
  description = "FIRESTORE_DATABASE: Firestore database id holding dedup records and FIFO state."
  default     = "(default)"
}

variable "create_firestore_database" {
  type        = bool
  description = "Create the Firestore (native mode) database. Leave false to use an existing one, such as the project's (default)."
  default     = false
}

variable "firestore_location_id" {
  type        = string
  description = "Location of a database created by this module (e.g. eur3, nam5, europe-west1). Required when create_firestore_database is true."
  default     = null
}

variable "dedup_collection" {
  type        = string
  description = "DEDUP_COLLECTION: collection (group) of the dedup records; gets the TTL policy on expire_at."
  default     = "pubsub_toolkit_dedup"
}

variable "extra_ttl_collection_groups" {
  type        = map(string)
  description = "More collection groups whose `expire_at` gets a TTL policy, keyed by purpose (e.g. another DEDUP_COLLECTION). The FIFO collections hold live state and get none."
  default     = {}
}

# ---------------------------------------------------------------------------------------------
# Delayed delivery: Cloud Tasks + the relay (App Engine or Cloud Run)
# ---------------------------------------------------------------------------------------------

variable "enable_delayed_delivery" {
  type        = bool
  description = "Create the Cloud Tasks queue, the invoker account and the relay. False: TASKS_QUEUE stays unset and due-later messages are dead-lettered (delayed_delivery_unavailable)."
  default     = true
}

variable "tasks_queue_name" {
  type        = string
  description = "Cloud Tasks queue name (TASKS_QUEUE is rendered as its full path)."
  default     = "pubsub-toolkit-delay"
}

variable "tasks_target" {
  type        = string
  description = "TASKS_TARGET: http (tasks call RELAY_URL/release with an OIDC token of the invoker account) or appengine (App Engine routing, the relay trusts X-AppEngine-QueueName)."
  default     = "http"

  validation {
    condition     = contains(["http", "appengine"], var.tasks_target)
    error_message = "tasks_target must be http or appengine."
  }
}

variable "tasks_retry" {
  type = object({
    max_attempts       = optional(number, 100)
    min_backoff        = optional(string, "1s")
    max_backoff        = optional(string, "300s")
    max_doublings      = optional(number, 8)
    max_retry_duration = optional(string, "0s")
  })
  description = "Queue retry_config. The relay answers 5xx on transient failures and is idempotent, so generous retries are safe; 0s duration means no time limit."
  default     = {}
}

variable "tasks_rate_limits" {
  type = object({
    max_dispatches_per_second = optional(number, 500)
    max_concurrent_dispatches = optional(number, 1000)
  })
  description = "Queue rate_limits: how fast due tasks are released to the relay."
  default     = {}
}

variable "tasks_logging_sampling_ratio" {
  type        = number
  description = "Fraction of task attempts Cloud Tasks logs (0 disables, 1 logs all)."
  default     = 0.1
}

variable "relay_platform" {
  type        = string
  description = "Where the relay runs: app_engine (App Engine standard, the default) or cloud_run (a Cloud Run service from cloud_run_relay.image, behind Cloud Run's IAM invoker check; no App Engine application is created). See README.md."
  default     = "app_engine"

  validation {
    condition     = contains(["app_engine", "cloud_run"], var.relay_platform)
    error_message = "relay_platform must be app_engine or cloud_run."
  }
}

variable "relay_deploy" {
  type        = string
  description = "App Engine only: how the relay's code is deployed: terraform (google_app_engine_standard_app_version from the zipped bundle) or gcloud (`gcloud app deploy`, with env_variables from the relay_env_variables output). Cloud Run always deploys cloud_run_relay.image from here. See README.md."
  default     = "terraform"

  validation {
    condition     = contains(["terraform", "gcloud"], var.relay_deploy)
    error_message = "relay_deploy must be terraform or gcloud."
  }
}

variable "create_app_engine_application" {
  type        = bool
  description = "Create the project's App Engine application. It cannot be deleted and its location is permanent: set false when the project already has one (then set relay_url)."
  default     = true
}

variable "app_engine_location_id" {
  type        = string
  description = "App Engine location (e.g. europe-west, us-central, europe-west3); required when create_app_engine_application is true. Note us-central1 and europe-west1 are spelled without the 1."
  default     = null
}

variable "relay_url" {
  type        = string
  description = "RELAY_URL, the relay's base URL (no trailing slash), also the tasks' OIDC audience. Null: derived - on App Engine from the application created here (https://[SERVICE-dot-]HOSTNAME), on Cloud Run the service's deterministic URL (https://NAME-PROJECT_NUMBER.REGION.run.app). On Cloud Run a URL set here (a custom domain) is also made a custom audience of the service."
  default     = null
}

variable "relay" {
  type = object({
    service        = optional(string, "default")
    runtime        = optional(string, "python312")
    instance_class = optional(string, "F1")
    min_instances  = optional(number, 0)
    max_instances  = optional(number, 10)
    max_concurrent = optional(number, 8)
    entrypoint     = optional(string, "gunicorn --bind :$PORT --workers 1 --threads 8 --timeout 120 'main:create_app()'")
  })
  description = "The relay's App Engine standard version; mirrors appengine/relay/app.yaml (keep both in step). The first service of an app must be `default`."
  default     = {}
}

variable "cloud_run_relay" {
  type = object({
    name                = optional(string, "pubsub-toolkit-relay")
    image               = optional(string)
    cpu                 = optional(string, "1")
    memory              = optional(string, "512Mi")
    min_instances       = optional(number, 0)
    max_instances       = optional(number, 10)
    concurrency         = optional(number, 8)
    timeout_seconds     = optional(number, 120)
    ingress             = optional(string, "INGRESS_TRAFFIC_INTERNAL_ONLY")
    deletion_protection = optional(bool, false)
  })
  description = <<-EOT
    The relay's Cloud Run service when relay_platform = "cloud_run". `image` (required then) is
    built from build/appengine/relay with its Dockerfile (scripts/deploy-terraform does it, or:
    gcloud builds submit build/appengine/relay --tag=IMAGE). Defaults mirror the App Engine
    version (8 threads per instance, 0-10 instances). `ingress` INTERNAL_ONLY admits Cloud Tasks
    of the same project and refuses the internet at the network level; the invoker IAM check and
    the relay's own OIDC check apply on top.
  EOT
  default     = {}

  validation {
    # Cloud Run's deterministic URL needs NAME-PROJECT_NUMBER to fit one 63-character DNS label.
    condition     = can(regex("^[a-z]([-a-z0-9]{0,47}[a-z0-9])?$", var.cloud_run_relay.name))
    error_message = "cloud_run_relay.name must be lowercase letters, digits and dashes, start with a letter, end with a letter or digit, at most 49 characters."
  }

  validation {
    condition = contains(
      ["INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER", "INGRESS_TRAFFIC_ALL"],
      var.cloud_run_relay.ingress,
    )
    error_message = "cloud_run_relay.ingress must be INGRESS_TRAFFIC_INTERNAL_ONLY, INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER or INGRESS_TRAFFIC_ALL."
  }

  validation {
    condition = (
      var.cloud_run_relay.min_instances >= 0 &&
      var.cloud_run_relay.max_instances >= 1 &&
      var.cloud_run_relay.min_instances <= var.cloud_run_relay.max_instances
    )
    error_message = "cloud_run_relay needs 0 <= min_instances <= max_instances and max_instances >= 1."
  }

  validation {
    condition     = var.cloud_run_relay.concurrency >= 1 && var.cloud_run_relay.concurrency <= 1000
    error_message = "cloud_run_relay.concurrency must be between 1 and 1000 (Cloud Run's limits)."
  }

  validation {
    condition     = var.cloud_run_relay.timeout_seconds >= 1 && var.cloud_run_relay.timeout_seconds <= 3600
    error_message = "cloud_run_relay.timeout_seconds must be between 1 and 3600 (Cloud Run's limits)."
  }
}

# ---------------------------------------------------------------------------------------------
# Cloud Functions
# ---------------------------------------------------------------------------------------------

variable "build_dir" {
  type        = string
  description = "The repository's build/ folder written by `make build` (functions/<name>/ and appengine/relay/). Null: ../build next to this module."
  default     = null
}

variable "function_runtime" {
  type        = string
  description = "Cloud Functions runtime of ingress and consumer."
  default     = "python312"
}

variable "ingress" {
  type = object({
    name             = optional(string, "ingress")
    memory           = optional(string, "512Mi")
    cpu              = optional(string, "1")
    timeout_seconds  = optional(number, 60)
    min_instances    = optional(number, 0)
    max_instances    = optional(number, 20)
    concurrency      = optional(number, 8)
    publish_timeout  = optional(number, 30)
    lease_seconds    = optional(number, 90)
    extra_env        = optional(map(string), {})
    retry_on_failure = optional(bool, true)
  })
  description = "The ingress function (Pub/Sub trigger on the origin topic). retry_on_failure maps to RETRY_POLICY_RETRY: a raised (transient) error is redelivered."
  default     = {}

  validation {
    condition     = var.ingress.lease_seconds >= 2 * var.ingress.publish_timeout
    error_message = "ingress.lease_seconds (DEDUP_LEASE_SECONDS) must be at least twice ingress.publish_timeout (PUBLISH_TIMEOUT_SECONDS)."
  }
}

variable "consumer" {
  type = object({
    name            = optional(string, "consumer")
    consumer_id     = string
    handler         = string
    memory          = optional(string, "512Mi")
    cpu             = optional(string, "1")
    timeout_seconds = optional(number, 120)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 20)
    concurrency     = optional(number, 16)
    extra_env       = optional(map(string), {})
  })
  description = "Optional functions/consumer deployment (Pub/Sub trigger on the final topic): CONSUMER_ID and HANDLER=module:function; FIFO_* settings go in extra_env. Null: not deployed."
  default     = null
}

# ---------------------------------------------------------------------------------------------
# Monitoring
# ---------------------------------------------------------------------------------------------

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channel ids (projects/P/notificationChannels/N) every alert policy notifies."
  default     = []
}

variable "alert_thresholds" {
  type = object({
    dead_lettered_per_period = optional(number, 0)
    dead_letter_backlog      = optional(number, 0)
    fingerprint_mismatches   = optional(number, 0)
    gap_timeouts             = optional(number, 0)
    period                   = optional(string, "300s")
  })
  description = "Alerts fire when a count in `period` exceeds its threshold (0: on the first occurrence)."
  default     = {}
}
