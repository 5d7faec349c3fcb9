"""CKV_PTK_4: every Cloud Run service of the module demands an authenticated, authorised caller.

The relay on Cloud Run (cloudrun.tf) and the functions (2nd gen functions are Cloud Run services)
are invoked only by identities holding run.invoker on them: Cloud Tasks' invoker account, the
Eventarc trigger's account. Two HCL edits would open them to anyone who can reach them, and this
check refuses both:

* ``invoker_iam_disabled = true`` on a ``google_cloud_run_v2_service`` (Cloud Run stops checking
  run.invoker; the relay would then receive tokens nobody verified);
* ``allUsers`` or ``allAuthenticatedUsers`` in a ``google_cloud_run_v2_service_iam_member`` /
  ``_iam_binding`` (or the v1 ``google_cloud_run_service_iam_*``).

checkov's built-in public-access check covers the v1 resources only. A service must also say
``invoker_iam_disabled = false`` explicitly, so that the decision is written down where an edit
would change it.
"""

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck

PUBLIC_MEMBERS = {"allUsers", "allAuthenticatedUsers"}
SERVICES = {"google_cloud_run_v2_service"}


def _members(conf):
    """The member(s) an IAM member or binding resource names, as plain strings."""
    values = list(conf.get("member") or [])
    for members in conf.get("members") or []:
        values.extend(members if isinstance(members, list) else [members])
    return [value.strip('"') for value in values if isinstance(value, str)]


class CloudRunAuthenticated(BaseResourceCheck):
    def __init__(self):
        super().__init__(
            name="Cloud Run services check run.invoker and grant it to no public principal",
            id="CKV_PTK_4",
            categories=[CheckCategories.IAM],
            supported_resources=[
                "google_cloud_run_v2_service",
                "google_cloud_run_v2_service_iam_member",
                "google_cloud_run_v2_service_iam_binding",
                "google_cloud_run_service_iam_member",
                "google_cloud_run_service_iam_binding",
            ],
        )

    def scan_resource_conf(self, conf):
        if self.entity_type in SERVICES:
            self.evaluated_keys = ["invoker_iam_disabled"]
            disabled = (conf.get("invoker_iam_disabled") or [None])[0]
            return CheckResult.PASSED if disabled is False else CheckResult.FAILED
        self.evaluated_keys = ["member", "members"]
        if PUBLIC_MEMBERS & set(_members(conf)):
            return CheckResult.FAILED
        return CheckResult.PASSED


check = CloudRunAuthenticated()
