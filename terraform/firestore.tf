# Firestore: the database (optional), TTL on dedup records, and the indexes the queries need.
#
# Collections the toolkit uses (the library's names; with a name_prefix each begins with
# PUBSUB_TOOLKIT_STORE_PREFIX, e.g. blue_pubsub_toolkit_dedup):
#   pubsub_toolkit_dedup          one document per (namespace, key); carries expire_at -> TTL below.
#   pubsub_toolkit_fifo_state     one document per (consumer, group); the only query is the
#                                 sweeper's `consumer == X and listed == true` (the groups with
#                                 parked or blocked work). Equality filters are served by merging
#                                 the automatic single-field indexes: no composite index is
#                                 needed, so none is declared. A complete group's tombstone and an
#                                 idle group's record carry expire_at (DEDUP_TTL after their last
#                                 change) -> TTL below.
#   .../parked (subcollection)    read by document id (zero-padded seq): no query, no index.
#   pubsub_toolkit_fifo_counters  read and incremented by document id: no query, no index.
#   pubsub_toolkit_stats          one document per ingress instance (status page counters);
#                                 read whole (a few documents), carries expire_at -> TTL below.
# A group with parked or blocked work keeps expire_at null. The counters and the parked
# subcollection get no TTL policy.

resource "google_firestore_database" "this" {
  count = var.create_firestore_database ? 1 : 0

  project     = var.project_id
  name        = var.firestore_database
  location_id = var.firestore_location_id
  type        = "FIRESTORE_NATIVE"
  # Dedup markers and FIFO counters are the pipeline's memory: losing them re-runs effects.
  delete_protection_state = "DELETE_PROTECTION_ENABLED"

  depends_on = [google_project_service.this]

  lifecycle {
    precondition {
      condition     = var.firestore_location_id != null
      error_message = "firestore_location_id is required when create_firestore_database is true."
    }
  }
}

# TTL policy on expire_at. Firestore deletes expired documents up to ~24 h late, which is why
# the library treats an expired record as absent on read.
resource "google_firestore_field" "ttl" {
  for_each = local.ttl_collection_groups

  project    = var.project_id
  database   = var.create_firestore_database ? google_firestore_database.this[0].name : var.firestore_database
  collection = each.value
  field      = "expire_at"

  ttl_config {}

  # An empty index_config removes the automatic single-field indexes on expire_at: nothing
  # queries it, and an index on a monotonically increasing timestamp is a write hotspot.
  index_config {}

  # After whatever creates the database: this module's google_firestore_database, or the App
  # Engine application, which creates (default) (database_type = CLOUD_FIRESTORE, appengine.tf).
  depends_on = [
    google_project_service.this,
    google_firestore_database.this,
    google_app_engine_application.app,
  ]

  lifecycle {
    precondition {
      condition     = local.firestore_database_will_exist
      error_message = "Nothing creates the Firestore database ${var.firestore_database} and firestore_database_exists is false: set create_firestore_database = true (with firestore_location_id), or firestore_database_exists = true if the project already has it. (Only an App Engine application created here creates (default) by itself.)"
    }
  }
}

locals {
  # Who makes the database the TTL policies need: it exists already, this module creates it, or
  # the App Engine application created here creates (default).
  firestore_database_will_exist = (
    var.firestore_database_exists ||
    var.create_firestore_database ||
    (var.firestore_database == "(default)" && length(google_app_engine_application.app) > 0)
  )
}
