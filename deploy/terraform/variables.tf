variable "project_id" {
  type        = string
  description = "Project to deploy into."
}

variable "region" {
  type        = string
  description = "Region of the functions, the Cloud Tasks queue and the source bucket (e.g. europe-west1)."
}

variable "app_engine_location_id" {
  type        = string
  description = "App Engine location of the relay, permanent for the project (europe-west1 is spelled europe-west, us-central1 us-central)."
  default     = null
}

variable "create_app_engine_application" {
  type        = bool
  description = "Create the project's App Engine application; false when it already has one (then set relay_url)."
  default     = true
}

variable "relay_url" {
  type        = string
  description = "The relay's URL when the App Engine application is not created here (https://PROJECT.REGION_ID.r.appspot.com)."
  default     = null
}

variable "create_firestore_database" {
  type        = bool
  description = "Create the Firestore (native) database; false to use the project's existing (default)."
  default     = false
}

variable "firestore_location_id" {
  type        = string
  description = "Location of the Firestore database when created here (e.g. eur3, nam5)."
  default     = null
}

variable "enable_delayed_delivery" {
  type        = bool
  description = "Deploy the Cloud Tasks queue and the relay."
  default     = true
}

variable "relay_platform" {
  type        = string
  description = "Where the relay runs: app_engine (default) or cloud_run (then scripts/deploy-terraform builds its image; no App Engine application is created)."
  default     = "app_engine"
}

variable "cloud_run_relay" {
  type = object({
    name                = optional(string)
    image               = optional(string)
    cpu                 = optional(string)
    memory              = optional(string)
    min_instances       = optional(number)
    max_instances       = optional(number)
    concurrency         = optional(number)
    timeout_seconds     = optional(number)
    ingress             = optional(string)
    deletion_protection = optional(bool)
  })
  description = "The Cloud Run relay's settings (the module's cloud_run_relay; unset ones take its defaults). image is built by scripts/deploy-terraform unless set."
  default     = {}
}

variable "relay_image" {
  type        = string
  description = "Set by scripts/deploy-terraform: the relay image it built for relay_platform = \"cloud_run\" (overrides cloud_run_relay.image)."
  default     = null
}

variable "consumer" {
  type = object({
    consumer_id     = string
    handler         = string
    sweep_schedule  = optional(string)
    name            = optional(string)
    memory          = optional(string)
    cpu             = optional(string)
    timeout_seconds = optional(number)
    min_instances   = optional(number)
    max_instances   = optional(number)
    concurrency     = optional(number)
    extra_env       = optional(map(string))
  })
  description = "Deploy functions/consumer behind a push subscription on the final topic with this PUBSUB_TOOLKIT_CONSUMER_ID and PUBSUB_TOOLKIT_HANDLER (module:function); null: not deployed. sweep_schedule: cron of the Cloud Scheduler job calling its /sweep (unset: the module's default, every minute; \"\": no job). extra_env: more settings, e.g. PUBSUB_TOOLKIT_FIFO_POISON_POLICY. Unset attributes take the module's defaults (terraform/variables.tf)."
  default     = null
}

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channel ids every alert policy notifies (with alert_email)."
  default     = []
}

variable "alert_email" {
  type        = string
  description = "An email address the module creates a notification channel for; every alert notifies it (with notification_channels). null: none."
  default     = null
}

variable "name_prefix" {
  type        = string
  description = "Prefix of every name (topics, subscriptions, functions, queue, services, job, bucket, metrics, collections), so several deployments share a project: \"\" or e.g. \"blue-\"."
  default     = ""

  validation {
    condition     = can(regex("^([a-z][a-z0-9-]{0,8}-)?$", var.name_prefix))
    error_message = "name_prefix must be empty or 2-10 lowercase letters, digits and dashes, starting with a letter and ending with a dash (e.g. \"blue-\")."
  }
}

variable "service_account_prefix" {
  type        = string
  description = "Prefix of the service account ids; null: \"ptk-\" followed by name_prefix."
  default     = null
}

variable "dedup_backend" {
  type        = string
  description = "Store of the deployed parts: firestore, or redis (Memorystore: then set redis and network)."
  default     = "firestore"

  validation {
    condition     = contains(["firestore", "redis"], var.dedup_backend)
    error_message = "dedup_backend must be firestore or redis."
  }
}

variable "redis" {
  type = object({
    url_secret     = string
    ca_cert_secret = optional(string)
  })
  description = "Redis mode: Secret Manager secrets (NAME or projects/P/secrets/NAME) holding the whole URL with AUTH (rediss://:AUTH@10.x.y.z:6378/0) and optionally the server CA. The module never writes their values (they would sit in state)."
  default     = null
}

variable "network" {
  type = object({
    connector  = optional(string)
    network    = optional(string)
    subnetwork = optional(string)
    tags       = optional(list(string), [])
  })
  description = "Network attachment of the functions and the relay (Memorystore has only a private IP), egress to private ranges only: a Serverless VPC Access connector id, or network + subnetwork for Direct VPC egress (App Engine needs the connector). null: none."
  default     = null
}

variable "labels" {
  type        = map(string)
  description = "Labels on every resource that takes them."
  default     = {}
}

variable "build_dir" {
  type        = string
  description = "Where scripts/build-bundles wrote the bundles; null: the repository's build/."
  default     = null
}

# Set by scripts/deploy-terraform when it finds them in the project (imports.tf adopts them).
variable "app_engine_application_exists" {
  type        = bool
  description = "The project already has its App Engine application (a destroyed deployment leaves it: it can never be deleted): the apply imports it instead of creating it (409). Set by scripts/deploy-terraform."
  default     = false
}

variable "firestore_database_exists" {
  type        = bool
  description = "The project already has its (default) Firestore database (created by hand, by App Engine, or left by a destroyed deployment: destroy abandons it): the TTL policies use it, and a create_firestore_database apply imports it instead of creating it (409). Set by scripts/deploy-terraform."
  default     = false
}

variable "tasks_queue_exists" {
  type        = bool
  description = "The deployment's Cloud Tasks queue exists (kept by scripts/deploy-terraform --destroy: a deleted queue's name is reserved for up to 3 days): the apply imports it. Set by scripts/deploy-terraform."
  default     = false
}

# ---------------------------------------------------------------------------------------------
# The module's other inputs, passed through unchanged (types, defaults and meaning: terraform/
# variables.tf, which validates them). Declared here so a tfvars file can set them: Terraform
# only warns about a value for a variable the root does not declare, and drops an object
# attribute the root's type lacks. Object attributes left unset take the module's defaults.
# Not here: tasks_queue_name and firestore_database - scripts/deploy-terraform looks the queue
# and the database up by their default names to adopt them (imports.tf).
# ---------------------------------------------------------------------------------------------

variable "enable_apis" {
  type        = bool
  description = "Enable the Google APIs the module needs; false when the project factory does it."
  default     = true
}

variable "topics" {
  type = object({
    origin      = optional(string)
    final       = optional(string)
    dead_letter = optional(string)
  })
  description = "Topic names (name_prefix is put in front); unset: origin, final, dead-letter."
  default     = {}
}

variable "message_retention_duration" {
  type        = string
  description = "How long each topic retains messages, e.g. \"604800s\"."
  default     = "604800s"
}

variable "subscriptions" {
  type = map(object({
    topic                        = optional(string)
    ack_deadline_seconds         = optional(number)
    enable_message_ordering      = optional(bool)
    enable_exactly_once_delivery = optional(bool)
    max_delivery_attempts        = optional(number)
    minimum_backoff              = optional(string)
    maximum_backoff              = optional(string)
    filter                       = optional(string)
  }))
  description = "Pull subscriptions by name; null: final-sub when no consumer function reads the final topic."
  default     = null
}

variable "exactly_once_delivery" {
  type        = bool
  description = "Exactly-once delivery on the default pull subscription final-sub (docs/how-to/deploy.md)."
  default     = false
}

variable "ingress_message_ordering" {
  type        = bool
  description = "Message ordering on the ingress push subscription (replaces ingress-push when changed; docs/how-to/deploy.md)."
  default     = false
}

variable "push_max_delivery_attempts" {
  type        = number
  description = "Deliveries before ingress-push and consumer-push dead-letter a message (5-100)."
  default     = 10
}

variable "grant_token_creator_to_pubsub_agent" {
  type        = bool
  description = "Grant the Pub/Sub service agent serviceAccountTokenCreator on the push account (needed by agents created on or before 8 April 2021)."
  default     = true
}

variable "dead_letter_subscription" {
  type        = string
  description = "The pull subscription on the dead-letter topic that `pubsub-toolkit dlq` reads."
  default     = "dead-letter-sub"
}

variable "dedup_ttl_seconds" {
  type        = number
  description = "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS: lifetime of a dedup record, more than 604800 (7 days)."
  default     = 691200
}

variable "dedup_collection" {
  type        = string
  description = "PUBSUB_TOOLKIT_DEDUP_COLLECTION; null: pubsub_toolkit_dedup behind name_prefix."
  default     = null
}

variable "extra_ttl_collection_groups" {
  type        = map(string)
  description = "More collection groups whose expire_at gets a TTL policy."
  default     = {}
}

variable "tasks_target" {
  type        = string
  description = "PUBSUB_TOOLKIT_TASKS_TARGET: http (OIDC to the relay's URL) or appengine (App Engine routing)."
  default     = "http"
}

variable "tasks_retry" {
  type = object({
    max_attempts       = optional(number)
    min_backoff        = optional(string)
    max_backoff        = optional(string)
    max_doublings      = optional(number)
    max_retry_duration = optional(string)
  })
  description = "The queue's retry_config (the relay is told max_attempts)."
  default     = {}
}

variable "tasks_rate_limits" {
  type = object({
    max_dispatches_per_second = optional(number)
    max_concurrent_dispatches = optional(number)
  })
  description = "The queue's rate_limits."
  default     = {}
}

variable "tasks_logging_sampling_ratio" {
  type        = number
  description = "Fraction of task attempts Cloud Tasks logs."
  default     = 0.1
}

variable "relay_deploy" {
  type        = string
  description = "App Engine relay: terraform (this apply deploys its version) or gcloud (`gcloud app deploy` by hand)."
  default     = "terraform"
}

variable "relay" {
  type = object({
    service        = optional(string)
    runtime        = optional(string)
    instance_class = optional(string)
    min_instances  = optional(number)
    max_instances  = optional(number)
    max_concurrent = optional(number)
    entrypoint     = optional(string)
  })
  description = "The relay's App Engine version (mirrors appengine/relay/app.yaml). service: \"default\" unless set; with a name_prefix it must be set - \"default\" for the project's first deployment, another name for each later one."
  default     = {}

  validation {
    # The project has one App Engine application: a second, prefixed deployment on the
    # `default` service would move all its traffic to its own relay, refusing the first
    # deployment's tasks. The gcloud script asks for APP_ENGINE_SERVICE the same way.
    condition     = var.name_prefix == "" || !(var.enable_delayed_delivery && var.relay_platform == "app_engine") || try(var.relay.service, null) != null
    error_message = "With a name_prefix and the App Engine relay, set relay = { service = \"...\" }: \"default\" for the project's first deployment (an application's first service must be default), another name (e.g. \"blue-relay\") for each later one - deployments share the project's one App Engine application."
  }

  validation {
    # An application created by this apply has no service yet, and App Engine refuses any
    # other first service: the version's create would fail halfway through the first apply.
    # (scripts/deploy-terraform sets app_engine_application_exists when the project has one.)
    condition = !(
      var.enable_delayed_delivery && var.relay_platform == "app_engine" &&
      var.create_app_engine_application && !var.app_engine_application_exists
    ) || coalesce(try(var.relay.service, null), "default") == "default"
    error_message = "This apply creates the project's App Engine application, whose first service must be \"default\": set relay = { service = \"default\" } (a later deployment into the same project names its own service)."
  }
}

variable "function_runtime" {
  type        = string
  description = "Cloud Functions runtime of ingress and consumer."
  default     = "python312"
}

variable "ingress" {
  type = object({
    name            = optional(string)
    memory          = optional(string)
    cpu             = optional(string)
    timeout_seconds = optional(number)
    min_instances   = optional(number)
    max_instances   = optional(number)
    concurrency     = optional(number)
    publish_timeout = optional(number)
    lease_seconds   = optional(number)
    extra_env       = optional(map(string))
  })
  description = "The ingress function's settings; unset ones take the module's defaults."
  default     = {}
}

variable "metric_propagation_wait" {
  type        = string
  description = "The first apply's wait between the log-based metrics and their alert policies."
  default     = "120s"
}

variable "alert_thresholds" {
  type = object({
    dead_lettered_per_period = optional(number)
    dead_letter_backlog      = optional(number)
    fingerprint_mismatches   = optional(number)
    gap_timeouts             = optional(number)
    period                   = optional(string)
    oldest_unacked_age       = optional(number)
  })
  description = "Alert thresholds; unset ones take the module's defaults."
  default     = {}
}

variable "create_dashboard" {
  type        = bool
  description = "Create the Cloud Monitoring dashboard."
  default     = true
}
