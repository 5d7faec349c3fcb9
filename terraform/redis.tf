# Redis (Memorystore) mode, dedup_backend = "redis": the deployed parts read the Redis URL (with
# its AUTH string) and the server CA from Secret Manager at start-up (PUBSUB_TOOLKIT_REDIS_URL_SECRET,
# PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET; main.tf), so neither sits in an environment variable or in this
# module's state. The secrets and their values are the operator's (README.md); here only the
# components that use the store may read exactly those secrets.

locals {
  store_users = local.redis ? setintersection(toset(["ingress", "relay", "consumer"]), toset(keys(local.components))) : toset([])
  secret_bindings = merge([
    for component in local.store_users : {
      for purpose, secret in local.redis_secrets : "${component}/${purpose}" => { component = component, secret = secret }
    }
  ]...)
}

resource "google_secret_manager_secret_iam_member" "store_reads_secret" {
  for_each = local.secret_bindings

  project   = var.project_id
  secret_id = each.value.secret
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.component[each.value.component].member
}
