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
