"""CKV_PTK_5: a deployed part that may read Redis settings is attached to a network.

Memorystore has only a private IP: a function, Cloud Run service or App Engine version whose
environment carries PUBSUB_TOOLKIT_REDIS_URL or PUBSUB_TOOLKIT_REDIS_URL_SECRET but has no network
attachment cannot reach the store (every dedup call times out). Attachments, per resource type:

- google_cloudfunctions2_function: ``service_config.vpc_connector`` or a
  ``service_config.direct_vpc_network_interface`` block;
- google_cloud_run_v2_service: a ``template.vpc_access`` block (connector or network interfaces);
- google_app_engine_standard_app_version: a ``vpc_access_connector`` block.

This module renders each environment from locals (``each.value.env``, ``local.relay_env``), which a
static scanner cannot evaluate: such an environment may carry the Redis settings (it does with
dedup_backend = "redis"), so it counts as one that does. Only an environment that checkov resolved
to a map without PUBSUB_TOOLKIT_REDIS_URL / PUBSUB_TOOLKIT_REDIS_URL_SECRET passes without an
attachment. Whether the attachment is used (var.network set) is a value question for ``terraform
test`` (tests/redis.tftest.hcl); this check keeps the attachment from disappearing from the code.
"""

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck

REDIS_KEYS = ("PUBSUB_TOOLKIT_REDIS_URL", "PUBSUB_TOOLKIT_REDIS_URL_SECRET")


def _first(conf, key):
    value = conf.get(key)
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _blocks(conf, key):
    value = conf.get(key) or []
    return [block for block in value if isinstance(block, dict)]


def _may_carry_redis(env):
    """True unless ``env`` is a resolved map (or list of name/value pairs) without Redis keys."""
    if env is None:
        return False
    if isinstance(env, dict):
        return any(key in env for key in REDIS_KEYS)
    if isinstance(env, list) and all(isinstance(item, dict) for item in env):
        names = {str(_first(item, "name")) for item in env}
        return bool(names & set(REDIS_KEYS))
    return True  # an expression checkov could not evaluate


def _cloud_run_env(template):
    envs = []
    for container in _blocks(template, "containers"):
        envs += _blocks(container, "env")
        envs += [{"name": ["<dynamic>"]} for _ in _blocks(container, "dynamic")]
    # A `dynamic "env"` block renders as unresolved pairs: treat it as an expression.
    if any(
        _first(item, "name") in (None, "<dynamic>") or "." in str(_first(item, "name"))
        for item in envs
    ):
        return "unresolved"
    return envs or None


class RedisNetworkAttachment(BaseResourceCheck):
    def __init__(self):
        super().__init__(
            name="Functions and relays that may use Redis (Memorystore) are attached to a VPC",
            id="CKV_PTK_5",
            categories=[CheckCategories.NETWORKING],
            supported_resources=[
                "google_cloudfunctions2_function",
                "google_cloud_run_v2_service",
                "google_app_engine_standard_app_version",
            ],
        )

    def scan_resource_conf(self, conf):
        resource_type = self.entity_type
        if resource_type == "google_cloudfunctions2_function":
            self.evaluated_keys = ["service_config/[0]/vpc_connector"]
            service = _first(conf, "service_config") or {}
            env = _first(service, "environment_variables")
            attached = bool(_first(service, "vpc_connector")) or bool(
                _blocks(service, "direct_vpc_network_interface")
            )
        elif resource_type == "google_cloud_run_v2_service":
            self.evaluated_keys = ["template/[0]/vpc_access"]
            template = _first(conf, "template") or {}
            env = _cloud_run_env(template)
            attached = bool(_blocks(template, "vpc_access"))
        else:
            self.evaluated_keys = ["vpc_access_connector"]
            env = _first(conf, "env_variables")
            attached = bool(_blocks(conf, "vpc_access_connector"))
        if _may_carry_redis(env) and not attached:
            return CheckResult.FAILED
        return CheckResult.PASSED


check = RedisNetworkAttachment()
