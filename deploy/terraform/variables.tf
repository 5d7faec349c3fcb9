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
    name            = optional(string)
    image           = optional(string)
    cpu             = optional(string)
    memory          = optional(string)
    min_instances   = optional(number)
    max_instances   = optional(number)
    concurrency     = optional(number)
    timeout_seconds = optional(number)
    ingress         = optional(string)
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
    consumer_id    = string
    handler        = string
    sweep_schedule = optional(string)
  })
  description = "Deploy functions/consumer behind a push subscription on the final topic with this PUBSUB_TOOLKIT_CONSUMER_ID and PUBSUB_TOOLKIT_HANDLER (module:function); null: not deployed. sweep_schedule: cron of the Cloud Scheduler job calling its /sweep (unset: the module's default, every minute; \"\": no job)."
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
