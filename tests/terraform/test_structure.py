"""The Terraform module's conventions (structure.py), asserted on terraform/ with python-hcl2.

test_checks_catch_breakage.py proves these checks fail on a broken copy; here they must pass.
"""

from __future__ import annotations

import pytest

from tests.terraform import iac, structure


@pytest.mark.parametrize("name", sorted(structure.CHECKS))
def test_module_convention(name: str) -> None:
    problems = structure.CHECKS[name](iac.TERRAFORM_DIR)
    assert problems == [], "\n".join(problems)


def test_relay_variable_mirrors_app_yaml() -> None:
    problems = structure.relay_mirrors_app_yaml(iac.TERRAFORM_DIR, iac.ROOT / structure.APP_YAML)
    assert problems == [], "\n".join(problems)


def test_cloud_run_relay_variable_mirrors_app_yaml() -> None:
    problems = structure.cloud_run_relay_mirrors_app_yaml(
        iac.TERRAFORM_DIR, iac.ROOT / structure.APP_YAML
    )
    assert problems == [], "\n".join(problems)


def test_every_module_file_is_parsed() -> None:
    # A file hcl2 cannot read, or a new file outside the glob, would make every check vacuous.
    parsed = structure.load(iac.TERRAFORM_DIR)
    assert {"variables.tf", "outputs.tf", "versions.tf", "main.tf"} <= set(parsed)
    for file in ("pubsub.tf", "iam.tf", "functions.tf", "tasks.tf", "monitoring.tf", "cloudrun.tf"):
        assert parsed[file].get("resource"), f"{file}: no resource parsed"
