"""appengine/relay/app.yaml is valid for `gcloud app deploy`, checked by the Cloud SDK's own code.

tests/deploy/app_yaml_check.py runs under the SDK's Python the same parse/validate/convert steps
as the deploy command (offline). The broken copies prove the check rejects what the deploy would.
The relay's Terraform definition (var.relay, appengine.tf) mirrors app.yaml: compared here too.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import hcl2
import pytest

from tests.conftest import repo_root
from tests.deploy.sdk import check_app_yaml, load_app_yaml

ROOT = repo_root()
APP_YAML = ROOT / "appengine/relay/app.yaml"


def assert_relay_config(parsed: dict[str, object]) -> None:
    version = parsed["version"]
    assert isinstance(version, dict)
    assert (parsed["service"], parsed["env"], parsed["runtime"]) == (
        "default",
        "STANDARD",
        "python312",
    )
    assert "'main:create_app()'" in version["entrypoint"]["shell"]
    assert version["handlers"] == [
        {"urlRegex": "/.*", "securityLevel": "SECURE_ALWAYS", "script": {"scriptPath": "auto"}}
    ]


def test_source_app_yaml_is_valid() -> None:
    assert_relay_config(load_app_yaml(APP_YAML))


def test_built_app_yaml_is_valid(tmp_path: Path) -> None:
    subprocess.run(
        [str(ROOT / "scripts/build-bundles"), str(tmp_path)], check=True, capture_output=True
    )
    built = tmp_path / "appengine/relay/app.yaml"
    assert built.read_text() == APP_YAML.read_text()
    assert_relay_config(load_app_yaml(built))


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        # A key App Engine does not know (a typo of automatic_scaling).
        (lambda y: y.replace("automatic_scaling:", "automatic_scalling:"), "automatic_scalling"),
        # Scaling values of the wrong type.
        (lambda y: y.replace("max_instances: 10", "max_instances: many"), "many"),
        # Two scaling kinds at once.
        (lambda y: y + "manual_scaling:\n  instances: 1\n", "scaling"),
        # A runtime gcloud refuses outright.
        (lambda y: y.replace("runtime: python312", "runtime: python"), "python"),
        # A handler without a script or static target.
        (lambda y: y.replace("    script: auto\n", ""), "handler"),
    ],
    ids=["unknown-key", "bad-scaling-value", "two-scaling-kinds", "bad-runtime", "bad-handler"],
)
def test_broken_copies_are_rejected(tmp_path: Path, edit: object, error: str) -> None:
    broken = tmp_path / "app.yaml"
    text = edit(APP_YAML.read_text())  # type: ignore[operator]
    assert text != APP_YAML.read_text(), "the edit did not apply: update this test"
    broken.write_text(text)
    result = check_app_yaml(broken)
    assert result.returncode == 1, f"accepted a broken app.yaml:\n{text}"
    assert error.lower() in result.stderr.lower(), result.stderr


def terraform_relay_defaults() -> dict[str, object]:
    """var.relay's optional(...) defaults from terraform/variables.tf."""
    block = re.search(
        r'variable "relay" \{.*?\n\}', (ROOT / "terraform/variables.tf").read_text(), re.S
    )
    assert block, "variable relay not found in terraform/variables.tf"
    fields = re.findall(r"^\s+(\w+)\s*=\s*optional\(\w+,\s*(.+)\)\s*$", block.group(0), re.M)
    return {name: json.loads(value) for name, value in fields}


def test_app_yaml_matches_terraform_relay_version() -> None:
    """Both deploy paths run the same relay: runtime, class, entrypoint, scaling, handlers."""
    version = load_app_yaml(APP_YAML)["version"]
    relay = terraform_relay_defaults()
    scaling = version["automaticScaling"]
    assert {
        "service": "default",
        "runtime": version["runtime"],
        "instance_class": version["instanceClass"],
        "entrypoint": version["entrypoint"]["shell"],
        "min_instances": scaling["standardSchedulerSettings"]["minInstances"],
        "max_instances": scaling["standardSchedulerSettings"]["maxInstances"],
        "max_concurrent": scaling["maxConcurrentRequests"],
    } == relay
    with (ROOT / "terraform/appengine.tf").open() as f:
        resources = hcl2.load(f)["resource"]
    # python-hcl2 8 keeps HCL's quotes on labels and string values.
    tf_version = next(
        r['"google_app_engine_standard_app_version"']['"relay"']
        for r in resources
        if '"google_app_engine_standard_app_version"' in r
    )
    handler = tf_version["handlers"][0]
    assert [
        handler["url_regex"].strip('"'),
        handler["security_level"].strip('"'),
        handler["script"][0]["script_path"].strip('"'),
    ] == [
        version["handlers"][0]["urlRegex"],
        version["handlers"][0]["securityLevel"],
        version["handlers"][0]["script"]["scriptPath"],
    ]
