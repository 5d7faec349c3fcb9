# The deploy root `make deploy` applies (tests/deploy/test_deploy_scripts.py runs this file with
# mocked providers, as terraform/tests/ does for the module): a tfvars file's settings reach the
# module, and a prefixed deployment names its App Engine relay's service, as the gcloud script
# asks for APP_ENGINE_SERVICE.

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
  build_dir              = "/nonexistent/build"
  notification_channels  = ["projects/test-project/notificationChannels/1"]
}

# A second deployment in a project on the `default` service would take the first one's relay.
run "a_prefixed_app_engine_relay_must_name_its_service" {
  command = plan

  variables {
    name_prefix = "blue-"
  }

  expect_failures = [var.relay]
}

run "a_prefixed_cloud_run_relay_needs_no_service" {
  command = plan

  variables {
    name_prefix               = "blue-"
    relay_platform            = "cloud_run"
    cloud_run_relay           = { image = "europe-west1-docker.pkg.dev/test-project/r/relay:1" }
    firestore_database_exists = true
  }
}

# A new App Engine application's first service must be `default`: a prefixed first deployment
# uses it, a later one (the application exists, as make deploy finds) names its own.
run "a_new_application_s_relay_is_the_default_service" {
  command = plan

  variables {
    name_prefix = "blue-"
    relay       = { service = "blue-relay" }
  }

  expect_failures = [var.relay]
}

run "tfvars_settings_reach_the_module" {
  command = apply

  variables {
    name_prefix                   = "blue-"
    relay                         = { service = "blue-relay" }
    app_engine_application_exists = true
    ingress                       = { max_instances = 50, extra_env = { PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS = "10" } }
    tasks_retry                   = { max_attempts = 20 }
    consumer                      = { consumer_id = "billing", handler = "example_handler:handle" }
  }

  # The existing application is adopted (imports.tf); mocked, as imports from mocks cannot be.
  override_resource {
    target = module.pubsub_toolkit.google_app_engine_application.app
    values = {
      default_hostname = "test-project.ew.r.appspot.com"
      code_bucket      = "staging.test-project.appspot.com"
    }
  }

  assert {
    condition     = module.pubsub_toolkit.relay_env_variables["PUBSUB_TOOLKIT_RELAY_URL"] == "https://blue-relay-dot-test-project.ew.r.appspot.com"
    error_message = "relay.service must reach the module: the relay's URL is its service's."
  }
  assert {
    condition = (
      module.pubsub_toolkit.ingress_env["PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS"] == "10" &&
      module.pubsub_toolkit.ingress_env["PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS"] == "30" &&
      module.pubsub_toolkit.relay_env_variables["PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS"] == "20"
    )
    error_message = "ingress.extra_env and tasks_retry must reach the module, unset attributes keeping its defaults."
  }
  assert {
    condition     = module.pubsub_toolkit.sweep_job != null && contains(keys(module.pubsub_toolkit.functions), "consumer")
    error_message = "a consumer with only its id and handler must take the module's defaults (the sweep job every minute)."
  }
  assert {
    condition     = output.producer_env["PUBSUB_TOOLKIT_STORE_PREFIX"] == "blue_" && module.pubsub_toolkit.ingress_env["PUBSUB_TOOLKIT_STORE_PREFIX"] == "blue_"
    error_message = "the producer's environment is an output of the deploy root, with the store prefix its consumers use (name_prefix, dashes as underscores)."
  }
}
