"""CKV_PTK_6: a push subscription authenticates its pushes with an OIDC token.

The functions are HTTP functions behind Cloud Run's IAM invoker check (push.tf): a push
without ``push_config.oidc_token`` (service account and audience) is refused with 401/403 on
every delivery, and the only other way to make it work is opening the function to
unauthenticated callers. So every ``google_pubsub_subscription`` with a ``push_config`` must
name an OIDC identity (``service_account_email``) and an ``audience``. Push subscriptions are
also subscriptions: CKV_PTK_1 requires their dead-letter policy.
"""

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck


def _blocks(conf, key):
    return [block for block in conf.get(key) or [] if isinstance(block, dict)]


class PushSubscriptionOidc(BaseResourceCheck):
    def __init__(self):
        super().__init__(
            name="Pub/Sub push subscriptions push with an OIDC token and audience",
            id="CKV_PTK_6",
            categories=[CheckCategories.IAM],
            supported_resources=["google_pubsub_subscription"],
        )

    def scan_resource_conf(self, conf):
        pushes = _blocks(conf, "push_config")
        if not pushes:
            return CheckResult.PASSED  # a pull subscription
        self.evaluated_keys = ["push_config/[0]/oidc_token"]
        for push in pushes:
            tokens = _blocks(push, "oidc_token")
            if not tokens or not all(
                token.get("service_account_email") and token.get("audience") for token in tokens
            ):
                return CheckResult.FAILED
        return CheckResult.PASSED


check = PushSubscriptionOidc()
