# Redis (Memorystore) mode and the network attachment (issue 13): no Firestore-only resources,
# the URL only through Secret Manager, the secrets readable by the store's users only, every
# part attached to the VPC with private-ranges egress, and the validations. `terraform test`
# with mocked providers, as in wiring.tftest.hcl.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
  mock_resource "google_app_engine_application" {
    defaults = {
      default_hostname = "test-project.ew.r.appspot.com"
      code_bucket      = "staging.test-project.appspot.com"
    }
  }
}

mock_provider "google-beta" {}

mock_provider "time" {}

mock_provider "archive" {
  mock_data "archive_file" {
    defaults = {
      output_md5  = "0123456789abcdef0123456789abcdef"
      output_path = "/nonexistent/bundle.zip"
    }
  }
}

variables {
  project_id             = "test-project"
  region                 = "europe-west1"
  app_engine_location_id = "europe-west"
  dedup_backend          = "redis"
  redis                  = { url_secret = "redis-url", ca_cert_secret = "projects/other-project/secrets/redis-ca" }
  network                = { connector = "projects/test-project/locations/europe-west1/connectors/ptk" }
  build_dir              = "/nonexistent/build"
  # Alerts that notify nobody fail the check alerts_notify_someone (a test error here).
  notification_channels = ["projects/test-project/notificationChannels/1"]
}


run "redis_mode_has_no_firestore_resources" {
  command = apply

  variables {
    consumer = { consumer_id = "billing", handler = "example_handler:handle" }
  }

  assert {
    condition     = length(google_firestore_field.ttl) == 0 && length(google_project_iam_member.firestore_user) == 0
    error_message = "redis mode: no TTL fields (apply fails without Firestore) and no datastore.user grants."
  }
  assert {
    condition = alltrue([
      for env in [
        google_cloudfunctions2_function.this["ingress"].service_config[0].environment_variables,
        google_cloudfunctions2_function.this["consumer"].service_config[0].environment_variables,
        google_app_engine_standard_app_version.relay[0].env_variables,
      ] :
      !contains(keys(env), "PUBSUB_TOOLKIT_REDIS_URL") &&
      env["PUBSUB_TOOLKIT_REDIS_URL_SECRET"] == "projects/test-project/secrets/redis-url/versions/latest" &&
      env["PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET"] == "projects/other-project/secrets/redis-ca/versions/latest" &&
      env["PUBSUB_TOOLKIT_STORE_BACKEND"] == "redis"
    ])
    error_message = "redis mode: PUBSUB_TOOLKIT_REDIS_URL_SECRET and PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET (version names), never PUBSUB_TOOLKIT_REDIS_URL."
  }
  assert {
    condition = (
      toset(keys(google_secret_manager_secret_iam_member.store_reads_secret)) == toset(["ingress/url", "ingress/ca_cert", "relay/url", "relay/ca_cert", "consumer/url", "consumer/ca_cert"]) &&
      google_secret_manager_secret_iam_member.store_reads_secret["relay/url"].secret_id == "projects/test-project/secrets/redis-url" &&
      google_secret_manager_secret_iam_member.store_reads_secret["relay/url"].member == google_service_account.component["relay"].member &&
      google_secret_manager_secret_iam_member.store_reads_secret["ingress/ca_cert"].secret_id == "projects/other-project/secrets/redis-ca" &&
      alltrue([for m in google_secret_manager_secret_iam_member.store_reads_secret : m.role == "roles/secretmanager.secretAccessor"])
    )
    error_message = "the store's users (ingress, relay, consumer) read exactly the Redis secrets."
  }
  assert {
    condition = alltrue([
      for f in google_cloudfunctions2_function.this :
      f.service_config[0].vpc_connector == "projects/test-project/locations/europe-west1/connectors/ptk" &&
      f.service_config[0].vpc_connector_egress_settings == "PRIVATE_RANGES_ONLY"
    ])
    error_message = "every function reaches Memorystore through the connector, private ranges only."
  }
  assert {
    condition = (
      google_app_engine_standard_app_version.relay[0].vpc_access_connector[0].name == "projects/test-project/locations/europe-west1/connectors/ptk" &&
      google_app_engine_standard_app_version.relay[0].vpc_access_connector[0].egress_setting == "PRIVATE_IP_RANGES"
    )
    error_message = "the App Engine relay reaches Memorystore through the connector, private ranges only."
  }
  assert {
    condition     = contains(keys(google_project_service.this), "secretmanager.googleapis.com")
    error_message = "redis mode needs the Secret Manager API."
  }
}

run "cloud_run_relay_with_direct_vpc_egress" {
  command = apply

  variables {
    relay_platform  = "cloud_run"
    cloud_run_relay = { image = "europe-west1-docker.pkg.dev/test-project/r/relay:1" }
    relay_url       = "https://relay.example.com"
    network         = { network = "projects/test-project/global/networks/vpc", subnetwork = "projects/test-project/regions/europe-west1/subnetworks/fn", tags = ["ptk"] }
  }

  # What Cloud Run assigns: the tasks are sent to the deterministic URL even with a custom domain.
  override_resource {
    target = google_cloud_run_v2_service.relay
    values = {
      urls = ["https://pubsub-toolkit-relay-123456789012.europe-west1.run.app"]
    }
  }

  assert {
    condition = (
      google_cloud_run_v2_service.relay[0].template[0].vpc_access[0].egress == "PRIVATE_RANGES_ONLY" &&
      google_cloud_run_v2_service.relay[0].template[0].vpc_access[0].network_interfaces[0].subnetwork == "projects/test-project/regions/europe-west1/subnetworks/fn" &&
      google_cloud_run_v2_service.relay[0].template[0].vpc_access[0].connector == null
    )
    error_message = "the Cloud Run relay uses Direct VPC egress, private ranges only."
  }
  assert {
    condition = (
      google_cloudfunctions2_function.this["ingress"].service_config[0].direct_vpc_egress == "VPC_EGRESS_PRIVATE_RANGES_ONLY" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].direct_vpc_network_interface[0].network == "projects/test-project/global/networks/vpc" &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].direct_vpc_network_interface[0].tags == tolist(["ptk"]) &&
      google_cloudfunctions2_function.this["ingress"].service_config[0].vpc_connector == null
    )
    error_message = "the functions use Direct VPC egress, private ranges only."
  }
}

run "redis_needs_its_secret" {
  command = plan

  variables {
    redis = null
  }

  expect_failures = [var.dedup_backend]
}

run "redis_needs_a_network" {
  command = plan

  variables {
    network = null
  }

  expect_failures = [var.dedup_backend]
}

run "app_engine_relay_needs_a_connector" {
  command = plan

  variables {
    network = { network = "projects/test-project/global/networks/vpc", subnetwork = "projects/test-project/regions/europe-west1/subnetworks/fn" }
  }

  expect_failures = [var.network]
}

run "network_needs_exactly_one_kind" {
  command = plan

  variables {
    network = { connector = "projects/test-project/locations/europe-west1/connectors/ptk", network = "projects/test-project/global/networks/vpc", subnetwork = "s" }
  }

  expect_failures = [var.network]
}
