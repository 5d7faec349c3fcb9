"""CKV_PTK_2: no primitive (basic) role in any IAM member or binding resource.

roles/owner, roles/editor and roles/viewer grant project-wide access to nearly every API; the
module grants each component only predefined roles, resource-scoped where possible. Checkov's
built-in basic-role checks cover project, folder and organisation bindings only; this one covers
every ``google_*_iam_member`` / ``google_*_iam_binding`` (topics, subscriptions, buckets, queues,
service accounts, Cloud Run services...).
"""

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck

PRIMITIVE_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}


class NoPrimitiveRoles(BaseResourceCheck):
    def __init__(self):
        super().__init__(
            name="IAM members and bindings grant no primitive role (owner, editor, viewer)",
            id="CKV_PTK_2",
            categories=[CheckCategories.IAM],
            supported_resources=["google_*_iam_member", "google_*_iam_binding"],
        )

    def scan_resource_conf(self, conf):
        self.evaluated_keys = ["role"]
        role = (conf.get("role") or [None])[0]
        if isinstance(role, str) and role.strip('"') in PRIMITIVE_ROLES:
            return CheckResult.FAILED
        return CheckResult.PASSED


check = NoPrimitiveRoles()
