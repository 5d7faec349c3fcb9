"""CKV_PTK_1: every Pub/Sub subscription has a dead-letter policy.

A subscription without one redelivers a poison message for the whole retention period.
The one exemption is the module's terminal subscription ``google_pubsub_subscription.dead_letter``
(pubsub.tf), which reads the dead-letter topic itself: its only possible dead-letter target is
that same topic (a loop), and ``pubsub-toolkit dlq list`` nacks what it reads, so a policy would
move dead letters away from operators after N listings. It is exempt by resource address *and*
only while it reads the dead-letter topic, so renaming another subscription cannot borrow it.
"""

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck

EXEMPT_ADDRESS = "google_pubsub_subscription.dead_letter"
DEAD_LETTER_TOPIC = 'google_pubsub_topic.this["dead_letter"]'


def _first(conf, key):
    value = conf.get(key) or [None]
    return value[0] if isinstance(value, list) else value


class PubSubSubscriptionDeadLetterPolicy(BaseResourceCheck):
    def __init__(self):
        super().__init__(
            name="Pub/Sub subscriptions have a dead_letter_policy (bar the dead-letter one)",
            id="CKV_PTK_1",
            categories=[CheckCategories.GENERAL_SECURITY],
            supported_resources=["google_pubsub_subscription"],
        )

    def scan_resource_conf(self, conf):
        # __address__ is "module.NAME.TYPE.NAME[...]" when scanned through a module call.
        address = conf.get("__address__", "")
        is_terminal = address == EXEMPT_ADDRESS or address.endswith("." + EXEMPT_ADDRESS)
        if is_terminal and DEAD_LETTER_TOPIC in str(_first(conf, "topic")):
            return CheckResult.PASSED
        self.evaluated_keys = ["dead_letter_policy/[0]/dead_letter_topic"]
        policy = _first(conf, "dead_letter_policy")
        if isinstance(policy, dict) and _first(policy, "dead_letter_topic"):
            return CheckResult.PASSED
        return CheckResult.FAILED


check = PubSubSubscriptionDeadLetterPolicy()
