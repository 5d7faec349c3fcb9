"""Pub/Sub's own delivery features as deploy options on the gcloud path (issue 27, item 9):
exactly-once delivery on final-sub (EXACTLY_ONCE_DELIVERY) and message ordering on the ingress
push subscription (INGRESS_MESSAGE_ORDERING). Both off by default, each a trade-off
(docs/how-to/deploy.md). The Terraform module's variables are tested in
terraform/tests/wiring.tftest.hcl; what the Consumer does on such a subscription in
tests/integration/test_consumer_exactly_once.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.test_deploy_gcloud_push import BASE, DryRun, dry_run
from tests.deploy.test_deploy_scripts import assert_gcloud_parses, gcloud, run_script


def _subscription(run: DryRun, name: str) -> list[str]:
    (cmd,) = [c for c in gcloud(run.cmds, "pubsub", "subscriptions", "create") if c[4] == name]
    return cmd


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(tmp_path_factory.mktemp("default"), **BASE)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(
        tmp_path_factory.mktemp("both"),
        **BASE,
        EXACTLY_ONCE_DELIVERY="1",
        INGRESS_MESSAGE_ORDERING="1",
    )


def test_both_are_off_by_default(default: DryRun) -> None:
    final = _subscription(default, "final-sub")
    assert "--no-enable-exactly-once-delivery" in final
    assert "--enable-message-ordering" in final  # the consumer's subscription stays ordered
    assert "--enable-message-ordering" not in _subscription(default, "ingress-push")


def test_exactly_once_on_final_sub_and_ordering_on_ingress_push_when_asked(
    both: DryRun, tmp_path: Path
) -> None:
    final = _subscription(both, "final-sub")
    ingress = _subscription(both, "ingress-push")
    assert "--enable-exactly-once-delivery" in final
    assert "--enable-message-ordering" in ingress
    assert_gcloud_parses([final, ingress], tmp_path)


@pytest.mark.parametrize("name", ["EXACTLY_ONCE_DELIVERY", "INGRESS_MESSAGE_ORDERING"])
def test_a_value_other_than_0_or_1_is_refused_in_one_line(name: str, tmp_path: Path) -> None:
    result = run_script(
        "scripts/deploy-gcloud", "--dry-run", BUILD_DIR=str(tmp_path), **BASE, **{name: "yes"}
    )
    assert result.returncode != 0
    assert f"{name}=yes is not 0 or 1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
