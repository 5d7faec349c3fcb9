# Provider versions are bounded both ways: a 9.x major may remove or rename arguments. Checked
# offline against the google 8.7.0 schema only; the 6.x/7.x floor is unverified here. The floor
# 6.12 is the first release with every Cloud Run relay argument used (cloudrun.tf):
# `invoker_iam_disabled` came in 6.8.0 and the `urls` attribute in 6.12.0 (provider CHANGELOG).
terraform {
  # mock_provider / override_* in tests/*.tftest.hcl need 1.7.
  required_version = ">= 1.7, < 2.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.12, < 9.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3.0"
    }
  }
}
