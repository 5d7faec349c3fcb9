"""CKV_PTK_3: the Cloud Tasks queue signs every HTTP task with an OIDC token.

What is checkable in HCL is the queue's ``http_target.oidc_token`` (tasks.tf): the queue enforces
that identity and audience on every task whatever its creator put in it, so this one block is what
makes the relay's check (token email = PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT, audience =
PUBSUB_TOOLKIT_RELAY_URL) hold. The functions' environment (PUBSUB_TOOLKIT_RELAY_AUTH = "oidc",
main.tf) is a conditional local that a static scanner cannot evaluate; ``terraform test``
(tests/wiring.tftest.hcl) checks that it agrees with the queue. So: the queue must declare an
http_target whose oidc_token names both a service account and an audience, and no oauth_token (an
OAuth token is for Google APIs, not the relay). The App Engine routing alternative (tasks_target =
"appengine") lives in the same resource as a second dynamic block, so the OIDC block must always be
there.
"""

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck


def _blocks(conf, key):
    return [block for block in conf.get(key) or [] if isinstance(block, dict)]


class CloudTasksOidc(BaseResourceCheck):
    def __init__(self):
        super().__init__(
            name="Cloud Tasks queues call their HTTP target with an OIDC token and audience",
            id="CKV_PTK_3",
            categories=[CheckCategories.IAM],
            supported_resources=["google_cloud_tasks_queue"],
        )

    def scan_resource_conf(self, conf):
        self.evaluated_keys = ["http_target"]
        targets = _blocks(conf, "http_target")
        if not targets:
            return CheckResult.FAILED
        for target in targets:
            if _blocks(target, "oauth_token"):
                return CheckResult.FAILED
            tokens = _blocks(target, "oidc_token")
            if not tokens or not all(
                token.get("service_account_email") and token.get("audience") for token in tokens
            ):
                return CheckResult.FAILED
        return CheckResult.PASSED


check = CloudTasksOidc()
