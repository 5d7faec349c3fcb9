terraform {
  required_version = ">= 1.9, < 2.0"

  # Partial configuration: bucket and prefix come from backend.hcl (copy backend.hcl.example),
  # passed by scripts/deploy-terraform as -backend-config. No local state: it holds the
  # deployment's identity (accounts, subscriptions, the sources bucket) and must be shared.
  backend "gcs" {}

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 7.21, < 9.0"
    }
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.12, < 9.0"
    }
    time = {
      source  = "hashicorp/time"
      version = ">= 0.9, < 1.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

# The module creates the service agents with google_project_service_identity (google-beta only).
provider "google-beta" {
  project = var.project_id
  region  = var.region
}
