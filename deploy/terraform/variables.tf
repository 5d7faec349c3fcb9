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
    consumer_id = string
    handler     = string
  })
  description = "Deploy functions/consumer on the final topic with this CONSUMER_ID and HANDLER (module:function); null: not deployed."
  default     = null
}

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channel ids the alert policies notify."
  default     = []
}

variable "labels" {
  type        = map(string)
  description = "Labels on every resource that takes them."
  default     = {}
}

variable "eventarc_max_delivery_attempts" {
  type        = number
  description = "Dead-letter policy that scripts/deploy-terraform sets on the Eventarc subscriptions behind the functions (Terraform cannot)."
  default     = 10

  validation {
    condition     = var.eventarc_max_delivery_attempts >= 5 && var.eventarc_max_delivery_attempts <= 100
    error_message = "eventarc_max_delivery_attempts must be between 5 and 100 (Pub/Sub's limits)."
  }
}

variable "build_dir" {
  type        = string
  description = "Where scripts/build-bundles wrote the bundles; null: the repository's build/."
  default     = null
}
