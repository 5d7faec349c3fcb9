# Optional VPC attachment of the functions and the relay (var.network), needed for Memorystore,
# which has only a private IP. Egress to private ranges only, everywhere:
#   functions          vpc_connector + PRIVATE_RANGES_ONLY, or Direct VPC egress
#                      (direct_vpc_network_interface + VPC_EGRESS_PRIVATE_RANGES_ONLY)
#   Cloud Run relay    template.vpc_access { connector | network_interfaces, PRIVATE_RANGES_ONLY }
#   App Engine relay   vpc_access_connector { connector, PRIVATE_IP_RANGES } (a connector only:
#                      App Engine standard has no Direct VPC egress; variables.tf refuses that)
# The blocks themselves are in functions.tf, cloudrun.tf and appengine.tf.

locals {
  vpc_connector = var.network == null ? null : var.network.connector
  direct_vpc = var.network == null ? null : (var.network.network == null ? null : {
    network    = var.network.network
    subnetwork = var.network.subnetwork
    tags       = var.network.tags
  })
}
