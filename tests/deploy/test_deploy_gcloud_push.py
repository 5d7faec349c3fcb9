"""scripts/deploy-gcloud for issue 13, by dry-run: ordering, waits, the push subscriptions it owns.

What a first deploy on a fresh project needs and no parser can see: each new service account is
waited for before anything binds it (IAM is eventually consistent) and its bindings are retried;
each function is deployed before its run.app URL is read, and that URL is the push
subscription's endpoint and OIDC audience; the App Engine service agent is granted only once the
application exists; the two Firestore operations on one field run one after the other. Then the
topology: push subscriptions with OIDC, dead-letter and retry policies (ordering on the
consumer's), no Eventarc, the Pub/Sub agent's token creator on the push account, the Cloud
Scheduler job on the consumer's /sweep, Redis mode (secret names only, a VPC connector on every
component, secret accessor for the store's users), NAME_PREFIX on every name, final-sub only
without a consumer. deploy/lib.sh's retry and wait_until are checked by themselves at the end.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy.sdk import load_app_yaml
from tests.deploy.test_deploy_scripts import (
    ROOT,
    assert_gcloud_parses,
    commands,
    flag,
    gcloud,
    raw_commands,
    run_script,
)

P = "fake-proj"
BASE = {"PROJECT_ID": P, "REGION": "europe-west1"}
CONSUMER = {"CONSUMER_ID": "billing", "HANDLER": "example_handler:handle"}
REDIS = {
    "DEDUP_BACKEND": "redis",
    "REDIS_URL_SECRET": "redis-url",
    "REDIS_CA_CERT_SECRET": "projects/shared-proj/secrets/redis-ca",
    "VPC_CONNECTOR": "ptk-connector",
    # Set by someone who used it locally: it must not travel anywhere.
    "REDIS_URL": "rediss://:hunter2-auth@10.0.0.3:6378/0",
    "PUBSUB_TOOLKIT_REDIS_URL": "rediss://:hunter2-auth@10.0.0.3:6378/0",
}
CONNECTOR = f"projects/{P}/locations/europe-west1/connectors/ptk-connector"
PUBSUB_AGENT = "serviceAccount:service-<project-number>@gcp-sa-pubsub.iam.gserviceaccount.com"
GAE_AGENT = "serviceAccount:service-<project-number>@gcp-gae-service.iam.gserviceaccount.com"


def sa(component: str, prefix: str = "ptk-") -> str:
    return f"{prefix}{component}@{P}.iam.gserviceaccount.com"


def uri(function: str) -> str:
    """The placeholder the dry-run returns for `gcloud functions describe` (deploy-gcloud)."""
    return f"https://{function}-<project-number>.europe-west1.run.app"


class DryRun:
    def __init__(self, stdout: str, build: Path) -> None:
        self.stdout = stdout
        self.raw = raw_commands(stdout)
        self.cmds = commands(stdout)
        self.build = build

    def where(self, predicate: object) -> list[int]:
        return [i for i, c in enumerate(self.cmds) if predicate(c)]  # type: ignore[operator]

    def one(self, *words: str, arg: str | None = None) -> int:
        """Position of the single `gcloud words...` command (with positional ``arg``)."""
        n = len(words) + 1
        found = [
            i
            for i, c in enumerate(self.cmds)
            if c[:n] == ["gcloud", *words] and (arg is None or c[n] == arg)
        ]
        assert len(found) == 1, (words, arg, found)
        return found[0]

    def env_files(self) -> dict[str, dict[str, str]]:
        """Every rendered environment: functions and Cloud Run env files, App Engine's app.yaml."""
        files = {c[3]: flag(c, "env-vars-file") for c in gcloud(self.cmds, "functions", "deploy")}
        files |= {c[3]: flag(c, "env-vars-file") for c in gcloud(self.cmds, "run", "deploy")}
        envs = {
            name: dict(re.findall(r'^(\w+): "(.*)"$', Path(path).read_text(), re.M))
            for name, path in files.items()
            if path
        }
        app_yaml = self.build / "appengine/relay/app.yaml"
        if gcloud(self.cmds, "app", "deploy"):
            envs["app.yaml"] = load_app_yaml(app_yaml)["version"]["envVariables"]
        return envs


def dry_run(tmp: Path, **env: str) -> DryRun:
    build = tmp / "build"
    result = run_script("scripts/deploy-gcloud", "--dry-run", BUILD_DIR=str(build), **env)
    assert result.returncode == 0, result.stderr
    assert "Dry run: nothing was changed" in result.stdout
    return DryRun(result.stdout, build)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    """Firestore, App Engine relay, the consumer function with its sweep job."""
    return dry_run(tmp_path_factory.mktemp("full"), **BASE, **CONSUMER)


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(tmp_path_factory.mktemp("redis"), **BASE, **CONSUMER, **REDIS)


@pytest.fixture(scope="module")
def redis_cloud_run(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(
        tmp_path_factory.mktemp("redis-cr"), **BASE, **CONSUMER, **REDIS, RELAY_PLATFORM="cloud_run"
    )


@pytest.fixture(scope="module")
def prefixed(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(
        tmp_path_factory.mktemp("prefixed"),
        **BASE,
        **CONSUMER,
        NAME_PREFIX="blue-",
        APP_ENGINE_SERVICE="blue-relay",
    )


def members(cmd: list[str]) -> set[str]:
    """Accounts a command binds or binds on (the member, and the account of an SA policy)."""
    named = {flag(cmd, "member") or ""}
    if cmd[:4] == ["gcloud", "iam", "service-accounts", "add-iam-policy-binding"]:
        named.add(f"serviceAccount:{cmd[4]}")
    return named


# --- waits and ordering ----------------------------------------------------------------------


def test_each_new_account_is_waited_for_before_anything_binds_it(full: DryRun) -> None:
    creates = gcloud(full.cmds, "iam", "service-accounts", "create")
    assert {c[4] for c in creates} == {
        f"ptk-{c}"
        for c in ("ingress", "push", "build", "relay", "tasks-invoker", "consumer", "scheduler")
    }
    for create in creates:
        email = f"{create[4]}@{P}.iam.gserviceaccount.com"
        (wait,) = [
            i
            for i, c in enumerate(full.cmds)
            if c[0] == "wait_until"
            and c[4:8] == ["gcloud", "iam", "service-accounts", "describe"]
            and c[8] == email
        ]
        assert email in full.cmds[wait][1]  # it says what it waits for
        tries, seconds = int(full.cmds[wait][2]), int(full.cmds[wait][3])
        assert tries > 1 and tries * seconds >= 60  # Google: "60 seconds or more"
        uses = full.where(lambda c, e=email: f"serviceAccount:{e}" in members(c))
        assert uses, email
        assert full.cmds.index(create) < wait < min(uses), email


def test_every_binding_is_retried(full: DryRun, redis_cloud_run: DryRun) -> None:
    for run in (full, redis_cloud_run):
        bindings = [
            c
            for c in run.raw
            if any(w in c[:8] for w in ("add-iam-policy-binding", "add-invoker-policy-binding"))
        ]
        assert len(bindings) > 15
        for c in bindings:
            assert c[0] == "retry" and int(c[1]) > 1 and int(c[2]) > 0, c


def test_function_deploy_then_its_url_then_the_push_subscription(full: DryRun) -> None:
    for function, topic, ack in (("ingress", "origin", "60"), ("consumer", "final", "120")):
        deploy = full.one("functions", "deploy", arg=function)
        invoker = [
            i
            for i in full.where(
                lambda c: c[:3] == ["gcloud", "functions", "add-invoker-policy-binding"]
            )
            if full.cmds[i][3] == function
            and flag(full.cmds[i], "member") == f"serviceAccount:{sa('push')}"
        ]
        (describe,) = [
            i
            for i, c in enumerate(full.cmds)
            if c[:4] == ["gcloud", "functions", "describe", function]
            and flag(c, "format") == "value(serviceConfig.uri)"
        ]
        subscription = full.one("pubsub", "subscriptions", "create", arg=f"{function}-push")
        assert deploy < invoker[0] < describe < subscription, function
        # The URL comes from the describe, nowhere earlier.
        assert not [c for c in full.cmds[:describe] if any(uri(function) in a for a in c)]
        create = full.cmds[subscription]
        assert flag(create, "push-endpoint") == uri(function)
        assert flag(create, "push-auth-token-audience") == uri(function)
        assert flag(create, "topic") == topic and flag(create, "ack-deadline") == ack


def test_app_engine_agent_and_relay_build_grants_wait_for_the_application(full: DryRun) -> None:
    create = full.one("app", "create")
    (wait,) = [
        i
        for i, c in enumerate(full.cmds)
        if c[0] == "wait_until" and c[4:7] == ["gcloud", "app", "describe"]
    ]
    (bucket,) = [
        i
        for i, c in enumerate(full.cmds)
        if c[:3] == ["gcloud", "app", "describe"] and flag(c, "format") == "value(codeBucket)"
    ]
    grants = full.where(lambda c: GAE_AGENT in members(c))
    assert len(grants) == 1
    (agent_grant,) = grants
    assert create < wait < bucket < agent_grant
    staging = f"gs://staging.{P}.appspot.com"
    assert full.cmds[agent_grant][4] == staging
    # The relay's build runs as the relay's account (provider #18936): it reads the staging
    # bucket, writes logs and pushes the image - granted after the application exists too.
    relay = f"serviceAccount:{sa('relay')}"
    relay_build = {
        (c[4] if c[1] == "storage" else c[3], flag(c, "role"))
        for c in full.cmds[wait:]
        if flag(c, "member") == relay and c[1] in ("storage", "projects")
    }
    assert relay_build == {
        (P, "roles/logging.logWriter"),
        (P, "roles/artifactregistry.createOnPushWriter"),
        (staging, "roles/storage.objectViewer"),
    }


def test_firestore_ttl_then_index_on_each_field_never_async(full: DryRun) -> None:
    firestore = gcloud(full.cmds, "firestore")
    assert firestore and not [c for c in firestore if "--async" in c]
    steps = [
        (c[2], flag(c, "collection-group"))
        for c in firestore
        if c[2:4] in (["fields", "ttls"], ["indexes", "fields"])
    ]
    assert steps == [
        ("fields", "pubsub_toolkit_dedup"),
        ("indexes", "pubsub_toolkit_dedup"),
        ("fields", "pubsub_toolkit_stats"),
        ("indexes", "pubsub_toolkit_stats"),
        ("fields", "pubsub_toolkit_stats_minutes"),  # the status page's per-minute charts
        ("indexes", "pubsub_toolkit_stats_minutes"),
        ("fields", "pubsub_toolkit_fifo_state"),  # completed groups' tombstones expire
        ("indexes", "pubsub_toolkit_fifo_state"),
    ]


# --- push subscriptions, identities, scheduler -----------------------------------------------


def test_push_subscriptions_carry_oidc_dead_letter_and_retry_policies(full: DryRun) -> None:
    pushes = {
        c[4]: c
        for c in gcloud(full.cmds, "pubsub", "subscriptions", "create")
        if flag(c, "push-endpoint")
    }
    assert set(pushes) == {"ingress-push", "consumer-push"}
    for name, c in pushes.items():
        assert flag(c, "push-auth-service-account") == sa("push"), name
        assert (flag(c, "dead-letter-topic"), flag(c, "max-delivery-attempts")) == (
            "dead-letter",
            "10",
        )
        assert (flag(c, "min-retry-delay"), flag(c, "max-retry-delay")) == ("10s", "600s")
        assert flag(c, "message-retention-duration") == "7d"
        assert flag(c, "expiration-period") == "never"
        # The service agent acks what it dead-letters.
        (ack,) = [
            b
            for b in gcloud(full.cmds, "pubsub", "subscriptions", "add-iam-policy-binding")
            if b[4] == name
        ]
        assert (flag(ack, "member"), flag(ack, "role")) == (PUBSUB_AGENT, "roles/pubsub.subscriber")
    assert "--enable-message-ordering" in pushes["consumer-push"]
    assert "--enable-message-ordering" not in pushes["ingress-push"]


def test_an_existing_push_subscription_is_converged_by_update() -> None:
    """The update branch carries the same flags as the create (minus topic and ordering)."""
    script = (ROOT / "scripts/deploy-gcloud").read_text()
    body = re.search(r"^push_subscription\(\) \{\n(.*?)^\}", script, re.M | re.S)
    assert body
    assert re.search(
        r'run gcloud pubsub subscriptions update "\$name" "\$\{flags\[@\]\}"', body.group(1)
    )
    assert re.search(
        r'run gcloud pubsub subscriptions create "\$name" --topic="\$topic" "\$\{flags\[@\]\}"',
        body.group(1),
    )


def test_no_eventarc_anywhere(full: DryRun, redis_cloud_run: DryRun) -> None:
    for run in (full, redis_cloud_run):
        assert not [c for c in run.cmds if any("eventarc" in a for a in c)]
        assert not [c for c in run.cmds if any(a.startswith("--trigger-topic") for a in c)]
    for path in ("scripts/deploy-gcloud", "scripts/deploy-terraform", "deploy/lib.sh"):
        text = (ROOT / path).read_text()
        assert not re.search(r"eventarc_dead_letter|eventarc\.googleapis|gcloud eventarc", text), (
            path
        )


def test_pubsub_agent_may_mint_tokens_as_the_push_account_only(full: DryRun) -> None:
    token = [c for c in full.cmds if flag(c, "role") == "roles/iam.serviceAccountTokenCreator"]
    assert len(token) == 1
    (c,) = token
    assert c[:5] == ["gcloud", "iam", "service-accounts", "add-iam-policy-binding", sa("push")]
    assert flag(c, "member") == PUBSUB_AGENT
    # The agent exists before it is granted (created explicitly, not at the first push).
    identity = full.one("beta", "services", "identity", "create")
    assert flag(full.cmds[identity], "service") == "pubsub.googleapis.com"
    assert identity < full.cmds.index(c)
    # The push account may invoke exactly the two functions.
    invokes = {
        c[3]
        for c in gcloud(full.cmds, "functions", "add-invoker-policy-binding")
        if flag(c, "member") == f"serviceAccount:{sa('push')}"
    }
    assert invokes == {"ingress", "consumer"}


def test_scheduler_job_calls_the_consumer_s_sweep_with_oidc(full: DryRun) -> None:
    job = full.one("scheduler", "jobs", "create", "http")
    c = full.cmds[job]
    assert c[5] == "consumer-sweep"
    assert flag(c, "uri") == uri("consumer") + "/sweep"
    assert flag(c, "oidc-token-audience") == uri("consumer")
    assert flag(c, "oidc-service-account-email") == sa("scheduler")
    assert (flag(c, "http-method"), flag(c, "schedule")) == ("POST", "* * * * *")
    assert flag(c, "attempt-deadline") == "120s" and flag(c, "location") == "europe-west1"
    (describe,) = [
        i
        for i, d in enumerate(full.cmds)
        if d[:4] == ["gcloud", "functions", "describe", "consumer"]
    ]
    assert describe < job
    # The scheduler's account invokes the consumer only, before the job exists.
    invokes = [
        (i, d[3])
        for i, d in enumerate(full.cmds)
        if d[:3] == ["gcloud", "functions", "add-invoker-policy-binding"]
        and flag(d, "member") == f"serviceAccount:{sa('scheduler')}"
    ]
    assert [name for _, name in invokes] == ["consumer"] and invokes[0][0] < job
    (enable,) = gcloud(full.cmds, "services", "enable")
    assert "cloudscheduler.googleapis.com" in enable


@pytest.mark.parametrize(
    "env",
    [{**BASE, **CONSUMER, "SWEEP_SCHEDULE": ""}, BASE],
    ids=["empty-schedule", "no-consumer"],
)
def test_no_sweep_job_when_off_or_without_consumer(tmp_path: Path, env: dict[str, str]) -> None:
    run = dry_run(tmp_path, **env)
    assert gcloud(run.cmds, "scheduler") == []
    assert sa("scheduler") not in run.stdout
    (enable,) = gcloud(run.cmds, "services", "enable")
    assert "cloudscheduler.googleapis.com" not in enable


def test_a_custom_sweep_schedule_is_used(tmp_path: Path) -> None:
    run = dry_run(tmp_path, **BASE, **CONSUMER, SWEEP_SCHEDULE="*/5 * * * *")
    (job,) = gcloud(run.cmds, "scheduler", "jobs", "create", "http")
    assert flag(job, "schedule") == "*/5 * * * *"


@pytest.mark.parametrize(
    ("env", "created"),
    [
        (CONSUMER, False),
        ({}, True),
        ({**CONSUMER, "CREATE_FINAL_SUBSCRIPTION": "1"}, True),
    ],
    ids=["consumer", "no-consumer", "consumer-and-asked"],
)
def test_final_sub_only_when_someone_reads_it(
    tmp_path: Path, env: dict[str, str], created: bool
) -> None:
    run = dry_run(tmp_path, **BASE, **env)
    final = [
        c for c in gcloud(run.cmds, "pubsub", "subscriptions", "create") if c[4] == "final-sub"
    ]
    assert bool(final) == created
    acks = [
        c
        for c in gcloud(run.cmds, "pubsub", "subscriptions", "add-iam-policy-binding")
        if c[4] == "final-sub"
    ]
    assert bool(acks) == created
    if created:
        (c,) = final
        assert flag(c, "topic") == "final" and "--enable-message-ordering" in c
        assert flag(c, "dead-letter-topic") == "dead-letter" and not flag(c, "push-endpoint")


# --- Redis mode ------------------------------------------------------------------------------


def test_redis_mode_deploys_secret_names_never_the_url(
    redis: DryRun, redis_cloud_run: DryRun
) -> None:
    for run in (redis, redis_cloud_run):
        envs = run.env_files()
        assert len(envs) == 3, envs.keys()  # ingress, consumer, the relay
        for name, env in envs.items():
            assert "REDIS_URL" not in env and "PUBSUB_TOOLKIT_REDIS_URL" not in env, name
            assert env["PUBSUB_TOOLKIT_STORE_BACKEND"] == "redis", name
            assert (
                env["PUBSUB_TOOLKIT_REDIS_URL_SECRET"]
                == f"projects/{P}/secrets/redis-url/versions/latest"
            )
            assert (
                env["PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET"]
                == "projects/shared-proj/secrets/redis-ca/versions/latest"
            )
        # Nowhere: not in a flag, not in any file of the build.
        assert "hunter2" not in run.stdout
        assert not [p for p in run.build.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]
        assert not [c for c in run.cmds if any(a.startswith("--set-env-vars") for a in c)]


def test_redis_mode_attaches_every_component_to_the_connector(
    redis: DryRun, redis_cloud_run: DryRun
) -> None:
    for run in (redis, redis_cloud_run):
        deploys = gcloud(run.cmds, "functions", "deploy")
        assert {c[3] for c in deploys} == {"ingress", "consumer"}
        for c in deploys:
            assert flag(c, "vpc-connector") == CONNECTOR, c[3]
            assert flag(c, "egress-settings") == "private-ranges-only", c[3]
    (relay,) = gcloud(redis_cloud_run.cmds, "run", "deploy")
    assert flag(relay, "vpc-connector") == CONNECTOR
    assert flag(relay, "vpc-egress") == "private-ranges-only"
    version = load_app_yaml(redis.build / "appengine/relay/app.yaml")["version"]
    assert version["vpcAccessConnector"] == {
        "name": CONNECTOR,
        "egressSetting": "PRIVATE_IP_RANGES",
    }


def test_no_connector_without_one(full: DryRun) -> None:
    assert not [c for c in full.cmds if any(a.startswith("--vpc-") for a in c)]
    assert (
        "vpcAccessConnector"
        not in load_app_yaml(full.build / "appengine/relay/app.yaml")["version"]
    )


def test_redis_mode_store_users_read_exactly_the_secrets(redis: DryRun) -> None:
    grants = {
        (c[3], flag(c, "project"), flag(c, "member"), flag(c, "role"))
        for c in gcloud(redis.cmds, "secrets", "add-iam-policy-binding")
    }
    assert grants == {
        (secret, project, f"serviceAccount:{sa(c)}", "roles/secretmanager.secretAccessor")
        for secret, project in (("redis-url", P), ("redis-ca", "shared-proj"))
        for c in ("ingress", "relay", "consumer")
    }
    # No Firestore-only resources in Redis mode.
    assert gcloud(redis.cmds, "firestore") == []
    assert not [c for c in redis.cmds if flag(c, "role") == "roles/datastore.user"]
    (enable,) = gcloud(redis.cmds, "services", "enable")
    assert "secretmanager.googleapis.com" in enable


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"REDIS_URL_SECRET": "redis-url"}, "VPC_CONNECTOR not set"),
        ({"VPC_CONNECTOR": "ptk-connector"}, "REDIS_URL_SECRET not set"),
        ({"REDIS_URL": "redis://10.0.0.3:6379"}, "REDIS_URL_SECRET VPC_CONNECTOR not set"),
        ({"REDIS_URL_SECRET": "a/b", "VPC_CONNECTOR": "c"}, "REDIS_URL_SECRET=a/b is not a secret"),
        ({"REDIS_URL_SECRET": "u", "VPC_CONNECTOR": "Bad_Name"}, "VPC_CONNECTOR=Bad_Name is not"),
    ],
)
def test_redis_mode_names_what_is_missing_in_one_line(env: dict[str, str], missing: str) -> None:
    result = run_script("scripts/deploy-gcloud", "--dry-run", **BASE, DEDUP_BACKEND="redis", **env)
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert missing in line


# --- names -----------------------------------------------------------------------------------


def test_name_prefix_on_every_name(prefixed: DryRun) -> None:
    cmds = prefixed.cmds
    named = {
        ("pubsub", "topics", "create"): 4,
        ("pubsub", "subscriptions", "create"): 4,
        ("functions", "deploy"): 3,
        ("tasks", "queues", "create"): 4,
        ("scheduler", "jobs", "create", "http"): 5,
    }
    for words, position in named.items():
        found = gcloud(cmds, *words)
        assert found, words
        for c in found:
            assert c[position].startswith("blue-"), c
    (bucket,) = [c for c in gcloud(cmds, "storage", "buckets", "create")]
    assert bucket[4] == f"gs://{P}-blue-pubsub-toolkit-sources"
    accounts = {c[4] for c in gcloud(cmds, "iam", "service-accounts", "create")}
    assert accounts and all(a.startswith("ptk-blue-") for a in accounts)
    assert all(6 <= len(a) <= 30 for a in accounts)
    groups = {flag(c, "collection-group") for c in gcloud(cmds, "firestore", "fields", "ttls")}
    # The collection groups the prefixed library writes (PUBSUB_TOOLKIT_STORE_PREFIX=blue_).
    assert groups == {
        "blue_pubsub_toolkit_dedup",
        "blue_pubsub_toolkit_stats",
        "blue_pubsub_toolkit_stats_minutes",
        "blue_pubsub_toolkit_fifo_state",
    }
    envs = prefixed.env_files()
    for name, env in envs.items():
        assert (env["PUBSUB_TOOLKIT_FINAL_TOPIC"], env["PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC"]) == (
            "blue-final",
            "blue-dead-letter",
        )
        assert env["PUBSUB_TOOLKIT_DEDUP_COLLECTION"] == "blue_pubsub_toolkit_dedup", name
        # Two deployments in one project must not share FIFO counters, FIFO state or stats.
        assert env["PUBSUB_TOOLKIT_STORE_PREFIX"] == "blue_", name
    # The producer (the Publisher in the user's app) is told the same prefix.
    assert "PUBSUB_TOOLKIT_STORE_PREFIX=blue_" in prefixed.stdout.split("Producers' environment")[1]
    queue = envs["blue-ingress"]["PUBSUB_TOOLKIT_TASKS_QUEUE"]
    assert queue.endswith("/queues/blue-pubsub-toolkit-delay")
    # The App Engine relay on its own service, and the tasks' audience follows it.
    parsed = load_app_yaml(prefixed.build / "appengine/relay/app.yaml")
    assert parsed["service"] == "blue-relay"
    assert envs["app.yaml"]["PUBSUB_TOOLKIT_RELAY_URL"] == "https://blue-relay-dot-<app-hostname>"
    # Entry points and bundles keep their names.
    for c in gcloud(cmds, "functions", "deploy"):
        assert flag(c, "entry-point") == c[3].removeprefix("blue-")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NAME_PREFIX": "Blue-"}, "NAME_PREFIX=Blue- is not"),
        ({"NAME_PREFIX": "blue"}, "NAME_PREFIX=blue is not"),
        ({"NAME_PREFIX": "blue-"}, "set APP_ENGINE_SERVICE"),
        ({"SA_PREFIX": "a-much-too-long-prefix-"}, "SA_PREFIX=a-much-too-long-prefix- is not"),
        # App Engine's names for these two regions have no 1 (terraform's app_engine_location_id
        # refuses the same): `gcloud app create` would fail halfway through the deploy.
        (
            {"APP_ENGINE_LOCATION": "europe-west1"},
            'APP_ENGINE_LOCATION=europe-west1 is "europe-west"',
        ),
        ({"APP_ENGINE_LOCATION": "us-central1"}, 'APP_ENGINE_LOCATION=us-central1 is "us-central"'),
    ],
)
def test_bad_names_are_refused_in_one_line(env: dict[str, str], message: str) -> None:
    result = run_script("scripts/deploy-gcloud", "--dry-run", **BASE, **env)
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert message in line


def test_prefixed_cloud_run_relay_needs_no_app_engine_service(tmp_path: Path) -> None:
    run = dry_run(tmp_path, **BASE, NAME_PREFIX="blue-", RELAY_PLATFORM="cloud_run")
    (deploy,) = gcloud(run.cmds, "run", "deploy")
    assert deploy[3] == "blue-pubsub-toolkit-relay"


def test_new_commands_parse_with_the_installed_sdk(
    redis: DryRun, redis_cloud_run: DryRun, prefixed: DryRun, full: DryRun, tmp_path: Path
) -> None:
    """Each command shape (command words + flag names) the other dry-runs parse-check does not."""

    def shape(c: list[str]) -> tuple[object, ...]:
        words = tuple(a for a in c if not a.startswith("-"))[:5]
        return (words[:4], tuple(sorted(a.split("=")[0] for a in c if a.startswith("--"))))

    seen = {shape(c) for c in full.cmds}
    new = [
        c for run in (redis, redis_cloud_run, prefixed) for c in run.cmds if shape(c) not in seen
    ]
    assert gcloud(new, "secrets", "add-iam-policy-binding")
    assert gcloud(new, "run", "deploy")  # with --vpc-connector
    assert_gcloud_parses(new, tmp_path)


# --- deploy/lib.sh's retry and wait_until ----------------------------------------------------


def lib(script: str, dry_run: str = "0") -> subprocess.CompletedProcess[str]:
    """Run ``script`` after sourcing deploy/lib.sh, with `sleep` recorded instead of slept."""
    prelude = (
        f'source "{ROOT}/deploy/lib.sh"\n'
        'sleep() { echo "slept $1" >&2; }\n'
        "n=0\n"
        # fails until its 3rd call
        'flaky() { n=$((n + 1)); echo "call $n" >&2; ((n >= 3)); }\n'
    )
    return subprocess.run(
        ["bash", "-c", prelude + script],
        env={"PATH": "/usr/bin:/bin", "DRY_RUN": dry_run},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_retry_runs_until_success_within_its_bound() -> None:
    result = lib("retry 5 7 flaky && echo done")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["+ retry 5 7 flaky", "done"]
    assert re.findall(r"call \d|slept \d", result.stderr) == [
        "call 1",
        "slept 7",
        "call 2",
        "slept 7",
        "call 3",
    ]


def test_retry_gives_up_after_its_tries() -> None:
    result = lib("retry 2 7 flaky; echo not reached")
    assert result.returncode != 0 and "not reached" not in result.stdout
    assert re.findall(r"call \d|slept \d", result.stderr) == ["call 1", "slept 7", "call 2"]
    assert "gave up after 2 attempts: flaky" in result.stderr


def test_wait_until_waits_then_names_what_it_gave_up_on() -> None:
    ok = lib("wait_until 'the flaky thing' 4 5 flaky && echo ready")
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1] == "ready"
    assert ok.stdout.splitlines()[0] == r"+ wait_until the\ flaky\ thing 4 5 flaky"
    assert ok.stderr.count("slept 5") == 2 and "waiting for the flaky thing" in ok.stderr
    never = lib("wait_until 'service account x@p' 3 5 false")
    assert never.returncode != 0 and never.stderr.count("slept 5") == 2
    assert (
        never.stderr.strip()
        .splitlines()[-1]
        .endswith("gave up waiting for service account x@p after 3 x 5s")
    )


def test_dry_run_prints_the_wait_and_the_retry_and_runs_neither() -> None:
    result = lib("wait_until thing 12 5 flaky && retry 6 10 flaky && echo $n", dry_run="1")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "+ wait_until thing 12 5 flaky",
        "+ retry 6 10 flaky",
        "0",
    ]
    assert "slept" not in result.stderr and "call" not in result.stderr


def test_the_update_branches_parse_too(full: DryRun, tmp_path: Path) -> None:
    """A re-run updates the push subscriptions and the job with the create's flags (the script
    shares one flag list): those commands, topic and ordering left out, parse as well."""
    updates = []
    for c in gcloud(full.cmds, "pubsub", "subscriptions", "create"):
        if flag(c, "push-endpoint"):
            updates.append(
                [
                    a if a != "create" else "update"
                    for a in c
                    if not a.startswith(("--topic=", "--enable-message-ordering"))
                ]
            )
    (job,) = gcloud(full.cmds, "scheduler", "jobs", "create", "http")
    updates.append([a if a != "create" else "update" for a in job])
    assert len(updates) == 3
    assert_gcloud_parses(updates, tmp_path)
