# Inputs of the pubsub-toolkit module. Names of environment variables the deployed parts read
# are the README's Configuration table; this module renders them from these inputs.

# ---------------------------------------------------------------------------------------------
# Project and placement
# ---------------------------------------------------------------------------------------------

variable "project_id" {
  type        = string
  description = "Project that holds the topics, Firestore, the queue, the functions and the relay (App Engine or Cloud Run)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project id (6-30 lowercase letters, digits and dashes), not its name or number."
  }
}

variable "region" {
  type        = string
  description = "Region of the Cloud Functions, the Cloud Tasks queue and the source bucket (e.g. europe-west1)."

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Cloud region such as europe-west1 (not an App Engine location like europe-west)."
  }
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource that takes labels."
  default     = {}
}

variable "name_prefix" {
  type        = string
  description = <<-EOT
    Prefix of every name this module gives (topics, subscriptions, the queue, functions, the Cloud
    Run relay, the scheduler job, the source bucket, log metrics, alert names) and, with dashes as
    underscores, PUBSUB_TOOLKIT_STORE_PREFIX: in front of every Firestore collection and Redis key
    of the stores (FIFO counters and state, stats, dedup), so several deployments share a project:
    "" (today's names) or up to 9 lowercase letters, digits and dashes starting with a letter,
    ending in "-" (e.g. "blue-"). Producers use the same store prefix (output producer_env). The
    App Engine relay shares the project's one application: give each deployment its own
    relay.service.
  EOT
  default     = ""
  nullable    = false

  validation {
    condition     = can(regex("^([a-z][a-z0-9-]{0,8}-)?$", var.name_prefix))
    error_message = "name_prefix must be \"\" or a lowercase letter, up to 8 letters, digits or dashes, and a final \"-\" (e.g. \"blue-\")."
  }
}

variable "service_account_prefix" {
  type        = string
  description = "Prefix of the service account ids this module creates (one per component); ids are 6-30 characters and the longest component is tasks-invoker (13). Null: \"ptk-\" followed by name_prefix."
  default     = null

  validation {
    condition     = var.service_account_prefix == null ? true : can(regex("^[a-z][a-z0-9-]{0,16}$", var.service_account_prefix))
    error_message = "service_account_prefix must be lowercase letters, digits and dashes, at most 17 characters, starting with a letter."
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
  description = "Topic names (name_prefix is put in front): producers publish to origin, consumers read final, invalid and poison messages land on dead_letter."
  default     = {}
  nullable    = false

  validation {
    condition     = alltrue([for t in values(var.topics) : can(regex("^[a-zA-Z][-a-zA-Z0-9_.~+%]{2,200}$", t))])
    error_message = "Topic names must start with a letter and have 3-201 letters, digits or -_.~+% (Pub/Sub's rule, leaving room for name_prefix)."
  }
}

variable "message_retention_duration" {
  type        = string
  description = "How long each topic retains messages (seek/replay window), at most 31 days. Keep PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS above the subscriptions' retention."
  default     = "604800s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.message_retention_duration)) && try(tonumber(trimsuffix(var.message_retention_duration, "s")) >= 600 && tonumber(trimsuffix(var.message_retention_duration, "s")) <= 2678400, false)
    error_message = "message_retention_duration must be seconds between 600s and 2678400s (31 days), e.g. \"604800s\"."
  }
}

variable "subscriptions" {
  type = map(object({
    topic                   = optional(string, "final")
    ack_deadline_seconds    = optional(number, 60)
    enable_message_ordering = optional(bool, false)
    # Pull subscriptions only (Pub/Sub offers it for no push subscription); see
    # var.exactly_once_delivery for what it gives and costs.
    enable_exactly_once_delivery = optional(bool, false)
    max_delivery_attempts        = optional(number, 10)
    minimum_backoff              = optional(string, "10s")
    maximum_backoff              = optional(string, "600s")
    filter                       = optional(string)
  }))
  description = <<-EOT
    Pull subscriptions for consumers, keyed by subscription name (name_prefix is put in front).
    `topic` is a key of var.topics (origin, final). Every one gets a dead-letter policy, a retry
    policy and an oldest-unacked-message alert. Null (the default): `final-sub` on the final
    topic, with message ordering (fifo_group is the ordering key; the toolkit's own counters
    still enforce FIFO), when the consumer function is not deployed, and none when it is - a
    subscription nobody reads would fill for 7 days. An explicit map is used as it is.
  EOT
  default     = null

  validation {
    condition     = var.subscriptions == null ? true : alltrue([for s in values(var.subscriptions) : contains(["origin", "final"], s.topic)])
    error_message = "Each subscription's topic must be \"origin\" or \"final\" (the dead-letter topic has its own terminal subscription)."
  }

  validation {
    condition     = var.subscriptions == null ? true : alltrue([for s in values(var.subscriptions) : s.max_delivery_attempts >= 5 && s.max_delivery_attempts <= 100])
    error_message = "max_delivery_attempts must be between 5 and 100 (Pub/Sub's limits)."
  }

  validation {
    condition     = var.subscriptions == null ? true : alltrue([for s in values(var.subscriptions) : s.ack_deadline_seconds >= 10 && s.ack_deadline_seconds <= 600])
    error_message = "ack_deadline_seconds must be between 10 and 600 (Pub/Sub's limits)."
  }
}

variable "exactly_once_delivery" {
  type        = bool
  description = <<-EOT
    Exactly-once delivery on the default pull subscription final-sub (an explicit
    var.subscriptions sets enable_exactly_once_delivery per subscription). Pub/Sub then confirms
    each ack and does not deliver an acked message again, so fewer duplicates reach the store
    (a duplicate costs a store read); the Consumer logs an ack Pub/Sub refuses. Costs: a higher
    publish-to-ack latency, lower per-subscription throughput limits, and the guarantee holds
    within one region. It does not replace the toolkit's dedup: a producer's retry is a new
    message to Pub/Sub, and the effect and the ack are still two steps. docs/how-to/deploy.md.
  EOT
  default     = false
  nullable    = false
}

variable "ingress_message_ordering" {
  type        = bool
  description = <<-EOT
    Message ordering on the ingress push subscription (the Publisher sets the FIFO group as the
    ordering key): a group's messages reach ingress, and so the final topic, in publish order,
    so the consumer parks fewer early arrivals. Costs: Pub/Sub pushes one message per group at
    a time, so a group moves at one ingress round trip per message, and a message ingress keeps
    failing (a store outage) holds its whole group until it is acked or dead-lettered. Off by
    default: the consumer's gate orders each group either way. Pub/Sub fixes ordering when a
    subscription is created, so changing this on a deployed stack replaces ingress-push, and
    messages not yet pushed are lost with the old one: stop the publishers and let its backlog
    drain first. docs/how-to/deploy.md.
  EOT
  default     = false
  nullable    = false
}

variable "push_max_delivery_attempts" {
  type        = number
  description = "Dead-letter policy of the push subscriptions that deliver to the functions (ingress-push, consumer-push): deliveries before a message goes to the dead-letter topic."
  default     = 10
  nullable    = false

  validation {
    condition     = var.push_max_delivery_attempts >= 5 && var.push_max_delivery_attempts <= 100
    error_message = "push_max_delivery_attempts must be between 5 and 100 (Pub/Sub's limits)."
  }
}

variable "grant_token_creator_to_pubsub_agent" {
  type        = bool
  description = "Grant the Pub/Sub service agent roles/iam.serviceAccountTokenCreator on the push account only: Google requires it for authenticated push when the agent was created on or before 8 April 2021, and it is harmless otherwise."
  default     = true
  nullable    = false
}

variable "dead_letter_subscription" {
  type        = string
  description = "Name of the pull subscription on the dead-letter topic that `pubsub-toolkit dlq list|replay` reads (name_prefix is put in front)."
  default     = "dead-letter-sub"
  nullable    = false

  validation {
    condition     = can(regex("^[a-zA-Z][-a-zA-Z0-9_.~+%]{2,200}$", var.dead_letter_subscription))
    error_message = "dead_letter_subscription must be a Pub/Sub subscription name: a letter, then 2-200 letters, digits or -_.~+%."
  }
}

# ---------------------------------------------------------------------------------------------
# Dedup and FIFO stores
# ---------------------------------------------------------------------------------------------

variable "dedup_backend" {
  type        = string
  description = "PUBSUB_TOOLKIT_STORE_BACKEND of the deployed parts: firestore, or redis (then set redis and network: Memorystore has only a private IP)."
  default     = "firestore"
  nullable    = false

  validation {
    condition     = contains(["firestore", "redis"], var.dedup_backend)
    error_message = "dedup_backend must be firestore or redis (memory is for a single local process only)."
  }

  validation {
    condition     = var.dedup_backend != "redis" || var.redis != null
    error_message = "dedup_backend = \"redis\" needs redis = { url_secret = \"SECRET\" } (the Secret Manager secret holding the Redis URL with its AUTH string)."
  }

  validation {
    condition     = var.dedup_backend != "redis" || var.network != null
    error_message = "dedup_backend = \"redis\" needs network = { connector = ... } or { network = ..., subnetwork = ... }: Memorystore has only a private IP."
  }
}

variable "redis" {
  type = object({
    url_secret     = string
    ca_cert_secret = optional(string)
  })
  description = <<-EOT
    Redis (Memorystore) mode, with dedup_backend = "redis". Secret Manager secrets, each a secret
    id NAME in this project or projects/P/secrets/NAME: `url_secret` holds the whole URL with the
    AUTH string (rediss://:AUTH@10.x.y.z:6378/0 with in-transit encryption), `ca_cert_secret`
    (optional) the instance's server CA PEM (google_redis_instance.server_ca_certs[0].cert). The
    deployed parts get PUBSUB_TOOLKIT_REDIS_URL_SECRET / PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET (their latest versions) and read
    them at start-up; the components that use the store get secretAccessor on exactly these
    secrets. The module never creates the secrets' values: they would sit in its state.
  EOT
  default     = null

  validation {
    condition = var.redis == null ? true : alltrue([
      for secret in compact([var.redis.url_secret, var.redis.ca_cert_secret]) :
      can(regex("^(projects/[a-z0-9-]+/secrets/)?[A-Za-z0-9_-]{1,255}$", secret))
    ])
    error_message = "redis.url_secret and redis.ca_cert_secret must be a secret id (letters, digits, - and _) or projects/PROJECT/secrets/ID, without /versions/."
  }
}

variable "network" {
  type = object({
    connector  = optional(string)
    network    = optional(string)
    subnetwork = optional(string)
    tags       = optional(list(string), [])
  })
  description = <<-EOT
    Attach the functions and the relay to a VPC (needed for Memorystore, which has only a private
    IP), egress to private ranges only (the public Google APIs stay on the default path). Exactly
    one of: `connector`, a Serverless VPC Access connector
    (projects/P/locations/REGION/connectors/NAME), or `network` + `subnetwork` for Direct VPC
    egress (with optional network `tags`). The App Engine relay needs a connector. Null: no
    attachment.
  EOT
  default     = null

  validation {
    condition = var.network == null ? true : (
      (var.network.connector != null) != (var.network.network != null && var.network.subnetwork != null) &&
      (var.network.connector == null || (var.network.network == null && var.network.subnetwork == null))
    )
    error_message = "network needs exactly one of connector, or network together with subnetwork (Direct VPC egress)."
  }

  validation {
    condition     = var.network == null ? true : (var.network.connector == null ? true : can(regex("^projects/[^/]+/locations/[^/]+/connectors/[^/]+$", var.network.connector)))
    error_message = "network.connector must be the connector's full name: projects/PROJECT/locations/REGION/connectors/NAME."
  }

  validation {
    # App Engine standard reaches a VPC only through a Serverless VPC Access connector.
    condition     = var.network == null ? true : (var.network.connector != null || !(var.enable_delayed_delivery && var.relay_platform == "app_engine"))
    error_message = "The App Engine relay (relay_platform = \"app_engine\") needs network.connector: App Engine standard has no Direct VPC egress."
  }
}

variable "dedup_ttl_seconds" {
  type        = number
  description = "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS: lifetime of a dedup record. Must exceed the redelivery window (7 days of retention), hence 8 days."
  default     = 691200

  validation {
    condition     = var.dedup_ttl_seconds > 604800
    error_message = "dedup_ttl_seconds must exceed 604800 (7 days, Pub/Sub's maximum unacked retention)."
  }
}

variable "firestore_database" {
  type        = string
  description = "PUBSUB_TOOLKIT_FIRESTORE_DATABASE: Firestore database id holding dedup records and FIFO state."
  default     = "(default)"

  validation {
    condition     = var.firestore_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,62}$", var.firestore_database))
    error_message = "firestore_database must be \"(default)\" or a database id (4-63 lowercase letters, digits and dashes, starting with a letter)."
  }
}

variable "create_firestore_database" {
  type        = bool
  description = "Create the Firestore (native mode) database. Leave false to use an existing one, such as the project's (default)."
  default     = false
}

variable "firestore_database_exists" {
  type        = bool
  description = "The database firestore_database already exists in the project (created by hand, by an earlier App Engine application, or by a deployment since destroyed: destroy never deletes it). False with neither create_firestore_database nor an App Engine application created here, which creates (default): the plan stops, since the TTL policies need the database. scripts/deploy-terraform sets it by looking the database up."
  default     = false
  nullable    = false
}

variable "firestore_location_id" {
  type        = string
  description = "Location of a database created by this module (e.g. eur3, nam5, europe-west1). Required when create_firestore_database is true."
  default     = null
}

variable "dedup_collection" {
  type        = string
  description = "PUBSUB_TOOLKIT_DEDUP_COLLECTION: collection (group) of the dedup records; gets the TTL policy on expire_at. Null: pubsub_toolkit_dedup behind name_prefix with its dashes as underscores (\"blue-\": blue_pubsub_toolkit_dedup)."
  default     = null

  validation {
    condition     = var.dedup_collection == null ? true : can(regex("^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$", var.dedup_collection))
    error_message = "dedup_collection must be a Firestore collection id: letters, digits, _ and -, at most 100 characters."
  }
}

variable "extra_ttl_collection_groups" {
  type        = map(string)
  description = "More collection groups whose `expire_at` gets a TTL policy, keyed by purpose (e.g. another PUBSUB_TOOLKIT_DEDUP_COLLECTION). The FIFO counters hold live state and get none."
  default     = {}
}

# ---------------------------------------------------------------------------------------------
# Delayed delivery: Cloud Tasks + the relay (App Engine or Cloud Run)
# ---------------------------------------------------------------------------------------------

variable "enable_delayed_delivery" {
  type        = bool
  description = "Create the Cloud Tasks queue, the invoker account and the relay. False: PUBSUB_TOOLKIT_TASKS_QUEUE stays unset and due-later messages are dead-lettered (delayed_delivery_unavailable)."
  default     = true
}

variable "tasks_queue_name" {
  type        = string
  description = "Cloud Tasks queue name (name_prefix is put in front; PUBSUB_TOOLKIT_TASKS_QUEUE is rendered as its full path)."
  default     = "pubsub-toolkit-delay"
  nullable    = false

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,90}$", var.tasks_queue_name))
    error_message = "tasks_queue_name must be letters, digits and dashes, at most 90 characters (Cloud Tasks' limits, leaving room for name_prefix)."
  }
}

variable "tasks_target" {
  type        = string
  description = "PUBSUB_TOOLKIT_TASKS_TARGET: http (tasks call PUBSUB_TOOLKIT_RELAY_URL/release with an OIDC token of the invoker account) or appengine (App Engine routing, the relay trusts X-AppEngine-QueueName)."
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
  description = "Queue retry_config. The relay answers 5xx on transient failures and is idempotent, so generous retries are safe; 0s duration means no time limit. max_backoff must stay under 2 hours: the relay's last attempt settles a hand-over left in doubt by the attempt before it only within that grace."
  default     = {}

  validation {
    condition     = can(regex("^[0-9]+(\\.[0-9]+)?s$", var.tasks_retry.max_backoff)) ? tonumber(trimsuffix(var.tasks_retry.max_backoff, "s")) < 7200 : false
    error_message = "tasks_retry.max_backoff must be a duration in seconds (\"300s\") under 7200s: the relay's last attempt settles a hand-over left in doubt within a 2-hour grace (docs/how-to/delay-and-cancel.md)."
  }
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

  validation {
    # App Engine knows these two regions only as europe-west and us-central: with the 1 the
    # application's create call fails in the middle of the first apply.
    condition     = !contains(["europe-west1", "us-central1"], coalesce(var.app_engine_location_id, "-"))
    error_message = "app_engine_location_id is App Engine's name for the location: europe-west1 is \"europe-west\" and us-central1 is \"us-central\" (the only two App Engine spells without the 1)."
  }

  validation {
    # App Engine-routed queues and the App Engine relay's VPC connector must be in the
    # application's region, which is `region` (europe-west is europe-west1, us-central
    # us-central1).
    # (HCL's || evaluates both sides: a null location reads as the region itself.)
    condition = !(
      var.enable_delayed_delivery && var.relay_platform == "app_engine" &&
      (var.tasks_target == "appengine" || try(var.network.connector, null) != null)
      ) || lookup(
      { "europe-west" = "europe-west1", "us-central" = "us-central1" },
      coalesce(var.app_engine_location_id, var.region), coalesce(var.app_engine_location_id, var.region)
    ) == var.region
    error_message = "With tasks_target = \"appengine\" or a VPC connector, the App Engine relay needs region = the application's region (app_engine_location_id europe-west is region europe-west1, us-central is us-central1): the queue and the connector must be there."
  }
}

variable "relay_url" {
  type        = string
  description = "PUBSUB_TOOLKIT_RELAY_URL, the relay's base URL (no trailing slash), also the tasks' OIDC audience. Null: derived - on App Engine from the application created here (https://[SERVICE-dot-]HOSTNAME), on Cloud Run the service's deterministic URL (https://NAME-PROJECT_NUMBER.REGION.run.app). On Cloud Run a URL set here (a custom domain) is also made a custom audience of the service."
  default     = null

  validation {
    condition     = var.relay_url == null ? true : can(regex("^https://[^/\\s]+(/[^\\s]*)?$", var.relay_url))
    error_message = "relay_url must be an https:// URL."
  }
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
    condition     = length(var.name_prefix) + length(var.cloud_run_relay.name) <= 49
    error_message = "name_prefix and cloud_run_relay.name together must be at most 49 characters (the service's deterministic URL NAME-PROJECT_NUMBER is one DNS label)."
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
    name            = optional(string, "ingress")
    memory          = optional(string, "512Mi")
    cpu             = optional(string, "1")
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 20)
    concurrency     = optional(number, 8)
    publish_timeout = optional(number, 30)
    lease_seconds   = optional(number, 90)
    extra_env       = optional(map(string), {})
  })
  description = "The ingress function (HTTP, behind the push subscription ingress-push on the origin topic; name_prefix is put in front of the name). A raised (transient) error answers 500 and Pub/Sub redelivers with the push subscription's retry policy, up to push_max_delivery_attempts. timeout_seconds is also the push subscription's ack deadline."
  default     = {}
  nullable    = false

  validation {
    condition     = var.ingress.timeout_seconds >= 10 && var.ingress.timeout_seconds <= 600
    error_message = "ingress.timeout_seconds must be between 10 and 600: it is the push subscription's ack deadline (Pub/Sub's limits)."
  }

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{0,40}[a-z0-9])?$", var.ingress.name))
    error_message = "ingress.name must be lowercase letters, digits and dashes, start with a letter, at most 42 characters (a function name, leaving room for name_prefix)."
  }

  validation {
    condition     = var.ingress.lease_seconds >= 2 * var.ingress.publish_timeout
    error_message = "ingress.lease_seconds (PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS) must be at least twice ingress.publish_timeout (PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS)."
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
    sweep_schedule  = optional(string, "* * * * *")
  })
  description = <<-EOT
    Optional functions/consumer deployment (HTTP, behind the push subscription consumer-push on
    the final topic, with message ordering): PUBSUB_TOOLKIT_CONSUMER_ID and
    PUBSUB_TOOLKIT_HANDLER=module:function; PUBSUB_TOOLKIT_FIFO_* settings go in extra_env.
    timeout_seconds is also the push subscription's ack deadline and the scheduler job's attempt
    deadline. `sweep_schedule` (cron, in UTC): the Cloud Scheduler job
    consumer-sweep that POSTs to the consumer's /sweep (parked messages, gap timeouts); "" or null:
    no job. Null: not deployed.
  EOT
  default     = null

  validation {
    condition     = var.consumer == null ? true : (var.consumer.timeout_seconds >= 15 && var.consumer.timeout_seconds <= 600)
    error_message = "consumer.timeout_seconds must be between 15 and 600: it is the push subscription's ack deadline (at most 600) and the scheduler's attempt deadline (at least 15)."
  }

  validation {
    condition     = var.consumer == null ? true : can(regex("^[a-z]([-a-z0-9]{0,40}[a-z0-9])?$", var.consumer.name))
    error_message = "consumer.name must be lowercase letters, digits and dashes, start with a letter, at most 42 characters (a function name, leaving room for name_prefix)."
  }

  validation {
    condition     = var.consumer == null ? true : (var.consumer.consumer_id != null && var.consumer.handler != null && can(regex("^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$", var.consumer.handler)))
    error_message = "consumer needs consumer_id and handler = \"module:function\"."
  }

  validation {
    condition     = var.consumer == null ? true : (var.consumer.sweep_schedule == null ? true : (var.consumer.sweep_schedule == "" || can(regex("^\\S+( \\S+){4}$", var.consumer.sweep_schedule))))
    error_message = "consumer.sweep_schedule must be a 5-field cron schedule (e.g. \"* * * * *\"), or \"\" for no scheduler job."
  }
}

# ---------------------------------------------------------------------------------------------
# Monitoring
# ---------------------------------------------------------------------------------------------

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channel ids (projects/P/notificationChannels/N) every alert policy notifies (with alert_email's channel)."
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "notification_channels must be channel names: projects/PROJECT/notificationChannels/ID."
  }
}

variable "alert_email" {
  type        = string
  description = "An email address: the module creates one email notification channel for it, which every alert notifies (with notification_channels). Null: none."
  default     = null

  validation {
    condition     = var.alert_email == null ? true : can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", var.alert_email))
    error_message = "alert_email must be an email address."
  }
}

variable "metric_propagation_wait" {
  type        = string
  description = "How long the first apply waits between creating the log-based metrics and the alert policies on them (provider issue #11102: a new metric can take minutes to be usable; if an alert still fails with \"Cannot find metric(s)\", run apply again)."
  default     = "120s"
  nullable    = false

  validation {
    condition     = can(regex("^[0-9]+(s|m)$", var.metric_propagation_wait))
    error_message = "metric_propagation_wait must be a duration in seconds or minutes, e.g. \"120s\" or \"5m\"."
  }
}

variable "alert_thresholds" {
  type = object({
    dead_lettered_per_period = optional(number, 0)
    dead_letter_backlog      = optional(number, 0)
    fingerprint_mismatches   = optional(number, 0)
    gap_timeouts             = optional(number, 0)
    period                   = optional(string, "300s")
    oldest_unacked_age       = optional(number, 86400)
  })
  description = "Alerts fire when a count in `period` exceeds its threshold (0: on the first occurrence); `oldest_unacked_age` (seconds, default 1 day): a pull subscription's oldest unacked message is older (nobody reads it)."
  default     = {}
  nullable    = false

  validation {
    condition     = can(regex("^[0-9]+s$", var.alert_thresholds.period)) && var.alert_thresholds.oldest_unacked_age > 0
    error_message = "alert_thresholds.period must be seconds (e.g. \"300s\") and oldest_unacked_age a positive number of seconds."
  }
}

variable "create_dashboard" {
  type        = bool
  description = "Create a Cloud Monitoring dashboard of the toolkit: the log-based metrics, the dead-letter backlog and the OpenTelemetry metrics entry points export with PUBSUB_TOOLKIT_METRICS_EXPORTER=cloud-monitoring (empty charts until they do)."
  default     = true
  nullable    = false
}
