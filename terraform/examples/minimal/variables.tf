variable "project_id" {
  type        = string
  description = "Project to deploy into."
}

variable "region" {
  type        = string
  description = "Region of the functions, the queue and the source bucket."
  default     = "europe-west1"
}

variable "app_engine_location_id" {
  type        = string
  description = "App Engine location of the relay (europe-west is europe-west1's App Engine name)."
  default     = "europe-west"
}

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channels for the alerts."
  default     = []
}

variable "alert_email" {
  type        = string
  description = "Where the alerts are emailed (the module creates the channel); null: notification_channels only."
  default     = null
}

variable "relay_platform" {
  type        = string
  description = "Where the relay runs: app_engine or cloud_run."
  default     = "app_engine"
}

variable "relay_image" {
  type        = string
  description = "With relay_platform = \"cloud_run\": the relay's image (gcloud builds submit build/appengine/relay --tag=IMAGE, after copying appengine/relay/Dockerfile there)."
  default     = null
}
