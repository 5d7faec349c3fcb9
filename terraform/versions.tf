# Provider versions are bounded both ways: a 9.x major may remove or rename arguments. Checked
# offline against the google 8.7.0 and google-beta 6.50.0 schemas only. The google floor is the
# newest argument the module sets: `direct_vpc_egress` and `direct_vpc_network_interface` of
# google_cloudfunctions2_function (functions.tf) need 7.21.0 (Google's "Configure Direct VPC
# egress for 2nd gen functions" page); an older provider refuses the argument even when null.
# The Cloud Run relay's `invoker_iam_disabled` (6.8.0) and `urls` (6.12.0) are older
# (tests/terraform/structure.py: ARGUMENT_FLOORS). google-beta only creates the service
# identities (identities.tf):
# `google_project_service_identity` exists in the beta provider alone. hashicorp/time holds the
# waits Google documents propagation delays for (time_sleep, triggers since 0.6).
terraform {
  # mock_provider / override_* in tests/*.tftest.hcl need 1.7; validations that refer to other
  # variables (dedup_backend needs redis and network, ...) need 1.9.
  required_version = ">= 1.9, < 2.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 7.21, < 9.0"
    }
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.12, < 9.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3.0"
    }
    time = {
      source  = "hashicorp/time"
      version = ">= 0.9, < 1.0"
    }
  }
}
