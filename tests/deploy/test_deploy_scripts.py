"""The deploy scripts, checked where no cloud is reachable: dry-runs compared with terraform/.

scripts/deploy-gcloud --dry-run prints every gcloud command; the expected topology (topics,
subscriptions, roles, APIs) is read from the Terraform module, so the two paths cannot drift
apart silently. scripts/deploy-terraform --dry-run stops before init/apply. Both must name a
missing setting in one line, and pass `bash -n` and shellcheck.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hcl2
import pytest

from pubsub_toolkit.config import Settings
from tests.conftest import repo_root
from tests.deploy.sdk import load_app_yaml

ROOT = repo_root()
TF = ROOT / "terraform"
SCRIPTS = ["scripts/deploy-gcloud", "scripts/deploy-terraform", "scripts/build-bundles"]
PRIMITIVE_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}


def run_script(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(ROOT / script), *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def raw_commands(stdout: str) -> list[list[str]]:
    """The printed commands (lines "+ cmd ..."), split as the shell would, helpers included."""
    return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def commands(stdout: str) -> list[list[str]]:
    """The printed commands, a `retry TRIES SECONDS cmd...` (deploy/lib.sh) shown as its cmd."""
    return [c[3:] if c[0] == "retry" else c for c in raw_commands(stdout)]


def flag(cmd: list[str], name: str) -> str | None:
    prefix = f"--{name}="
    return next((a[len(prefix) :] for a in cmd if a.startswith(prefix)), None)


def gcloud(cmds: list[list[str]], *words: str) -> list[list[str]]:
    return [c for c in cmds if c[: len(words) + 1] == ["gcloud", *words]]


# --- what the Terraform module creates -------------------------------------------------------


def tf_text() -> str:
    return "\n".join(p.read_text() for p in sorted(TF.glob("*.tf")))


def tf_topics() -> set[str]:
    block = re.search(r'variable "topics" \{.*?\n\}', tf_text(), re.S)
    assert block
    return set(re.findall(r'optional\(string, "([^"]+)"\)', block.group(0)))


def tf_dead_letter_subscription() -> str:
    """The module's terminal dead-letter subscription (read by `pubsub-toolkit dlq`)."""
    with (TF / "variables.tf").open() as f:
        variables = {k: v for d in hcl2.load(f)["variable"] for k, v in d.items()}
    return str(variables['"dead_letter_subscription"']["default"]).strip('"')


def tf_roles() -> set[str]:
    return set(re.findall(r'"(roles/[a-zA-Z.]+)"', tf_text()))


def tf_apis() -> set[str]:
    return set(re.findall(r'"([a-z]+\.googleapis\.com)"', (TF / "main.tf").read_text()))


def tf_publishers() -> dict[str, set[str]]:
    """iam.tf's `publishers` local: component -> topic keys it may publish to."""
    block = re.search(r"publishers = merge\((.*?)\n  \)", (TF / "iam.tf").read_text(), re.S)
    assert block
    pairs = re.findall(r"\{ (\w+) = \[([^\]]*)\] \}", block.group(1))
    names = {"final": "final", "dead_letter": "dead-letter"}
    return {c: {names[t.strip(' "')] for t in topics.split(",")} for c, topics in pairs}


# --- deploy-gcloud ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcloud_dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[str]], Path]:
    build = tmp_path_factory.mktemp("deploy") / "build"
    result = run_script(
        "scripts/deploy-gcloud",
        "--dry-run",
        PROJECT_ID="fake-proj",
        REGION="europe-west1",
        CONSUMER_ID="billing",
        HANDLER="example_handler:handle",
        BUILD_DIR=str(build),
    )
    assert result.returncode == 0, result.stderr
    assert "Dry run: nothing was changed" in result.stdout
    return commands(result.stdout), build


def test_every_topic_and_subscription_of_the_module(gcloud_dry_run: tuple) -> None:
    cmds, _ = gcloud_dry_run
    created_topics = {c[4] for c in gcloud(cmds, "pubsub", "topics", "create")}
    assert created_topics == tf_topics() == {"origin", "final", "dead-letter"}
    terminal = tf_dead_letter_subscription()
    created = {c[4]: c for c in gcloud(cmds, "pubsub", "subscriptions", "create")}
    # With the consumer function deployed: its push subscription, no final-sub (nobody reads it;
    # tests/deploy/test_deploy_gcloud_push.py checks the pull one without a consumer).
    assert set(created) == {"ingress-push", "consumer-push", terminal}
    for name in ("ingress-push", "consumer-push"):
        assert flag(created[name], "dead-letter-topic") == "dead-letter", name
        assert flag(created[name], "max-delivery-attempts") == "10", name
    assert flag(created["consumer-push"], "topic") == "final"
    assert "--enable-message-ordering" in created["consumer-push"]
    # Like the module: the terminal subscription has none (it would dead-letter into itself).
    assert flag(created[terminal], "dead-letter-topic") is None


def granted_roles(cmds: list[list[str]]) -> set[str | None]:
    granted = {flag(c, "role") for c in cmds if "add-iam-policy-binding" in c[:5]}
    # `functions add-invoker-policy-binding` is how gcloud grants run.invoker on a function.
    if any(c[:3] == ["gcloud", "functions", "add-invoker-policy-binding"] for c in cmds):
        granted.add("roles/run.invoker")
    return granted


def test_roles_match_the_module_and_none_is_primitive(gcloud_dry_run: tuple) -> None:
    cmds, _ = gcloud_dry_run
    granted = granted_roles(cmds)
    # The module's roles: these, Redis mode's secret accessor (test_deploy_gcloud_push.py), App
    # Engine-routed tasks' appViewer (the script sends HTTP tasks only) and the Terraform path's
    # builds bucket for the Cloud Run image (gcloud run deploy --source has its own).
    module_only = {
        "roles/secretmanager.secretAccessor",
        "roles/appengine.appViewer",
        "roles/storage.objectAdmin",
    }
    assert granted | module_only == tf_roles()
    assert not granted & PRIMITIVE_ROLES
    assert not any(r in " ".join(c) for c in cmds for r in PRIMITIVE_ROLES)


def test_publisher_bindings_are_per_topic_as_in_iam_tf(gcloud_dry_run: tuple) -> None:
    cmds, _ = gcloud_dry_run
    bindings: dict[str, set[str]] = {}
    for c in gcloud(cmds, "pubsub", "topics", "add-iam-policy-binding"):
        match = re.fullmatch(
            r"serviceAccount:ptk-(\w+)@fake-proj\.iam\.gserviceaccount\.com",
            flag(c, "member") or "",
        )
        if match:  # the Pub/Sub service agent's binding is checked with the subscriptions
            bindings.setdefault(match.group(1), set()).add(c[4])
    assert bindings == tf_publishers()
    # Project-level grants are only the ones Firestore and Cloud Build have no narrower scope for.
    project_roles = {flag(c, "role") for c in gcloud(cmds, "projects", "add-iam-policy-binding")}
    assert project_roles == {
        "roles/datastore.user",
        "roles/logging.logWriter",
        "roles/artifactregistry.writer",
        # The App Engine relay's build runs as the relay's account: it pushes the image.
        "roles/artifactregistry.createOnPushWriter",
        # The function build reads gcf-v2-sources-NUMBER-REGION (conditioned to that bucket).
        "roles/storage.objectViewer",
    }


APIS = {
    f"{api}.googleapis.com"
    for api in [
        "artifactregistry",
        "cloudbuild",
        "cloudfunctions",
        "cloudresourcemanager",
        "firestore",
        "iam",
        "logging",
        "monitoring",
        "pubsub",
        "run",
        "serviceusage",
        "storage",
        "cloudtasks",
        "appengine",
        "cloudscheduler",
    ]
}


def test_apis_are_the_contract_s(gcloud_dry_run: tuple) -> None:
    cmds, _ = gcloud_dry_run
    (enable,) = gcloud(cmds, "services", "enable")
    # +cloudresourcemanager, serviceusage, cloudscheduler (the sweep job); no eventarc.
    assert {a for a in enable if a.endswith(".googleapis.com")} == APIS


def test_apis_match_the_module(gcloud_dry_run: tuple) -> None:
    cmds, _ = gcloud_dry_run
    (enable,) = gcloud(cmds, "services", "enable")
    # secretmanager only in Redis mode (test_deploy_gcloud_push.py).
    assert {a for a in enable if a.endswith(".googleapis.com")} == tf_apis() - {
        "secretmanager.googleapis.com"
    }


def test_functions_are_http_functions_only_pubsub_and_scheduler_reach(
    gcloud_dry_run: tuple,
) -> None:
    cmds, build = gcloud_dry_run
    deploys = {c[3]: c for c in gcloud(cmds, "functions", "deploy")}
    assert set(deploys) == {"ingress", "consumer"}
    for name, deploy in deploys.items():
        assert flag(deploy, "entry-point") == name
        assert flag(deploy, "source") == str(build / f"functions/{name}")
        assert "--gen2" in deploy and "--trigger-http" in deploy
        assert "--no-allow-unauthenticated" in deploy and "--allow-unauthenticated" not in deploy
        assert flag(deploy, "ingress-settings") == "internal-only"
        # No Eventarc trigger of any kind (--trigger-topic, --trigger-service-account, --retry).
        assert [a for a in deploy if a.startswith(("--trigger-", "--retry"))] == ["--trigger-http"]
    ingress = deploys["ingress"]
    # The rendered environment is one the function's Settings accept.
    env_file = Path(flag(ingress, "env-vars-file") or "")
    env = dict(re.findall(r'^(\w+): "(.*)"$', env_file.read_text(), re.M))
    settings = Settings.from_env(env)
    assert settings.delay is not None and settings.delay.relay_auth == "oidc"


def test_rendered_relay_app_yaml_is_valid_and_complete(gcloud_dry_run: tuple) -> None:
    cmds, build = gcloud_dry_run
    (deploy,) = gcloud(cmds, "app", "deploy")
    assert deploy[3] == str(build / "appengine/relay/app.yaml")
    assert flag(deploy, "service-account") == "ptk-relay@fake-proj.iam.gserviceaccount.com"
    env = load_app_yaml(build / "appengine/relay/app.yaml")["version"]["envVariables"]
    settings = Settings.from_env(env)
    assert settings.delay is not None
    assert (
        settings.delay.queue
        == "projects/fake-proj/locations/europe-west1/queues/pubsub-toolkit-delay"
    )


@pytest.mark.parametrize("missing", ["PROJECT_ID", "REGION"])
def test_missing_setting_is_named_in_one_line(missing: str) -> None:
    env = {"PROJECT_ID": "fake-proj", "REGION": "europe-west1"}
    del env[missing]
    result = run_script("scripts/deploy-gcloud", "--dry-run", **env)
    assert result.returncode != 0
    assert result.stdout == ""  # nothing ran before the check
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"environment variable {missing} is required" in result.stderr


# --- deploy-terraform ------------------------------------------------------------------------


def test_terraform_dry_run_needs_a_tfvars_file(tmp_path: Path) -> None:
    result = run_script(
        "scripts/deploy-terraform", "--dry-run", TFVARS=str(tmp_path / "nope.tfvars")
    )
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert "nope.tfvars not found" in line and "terraform.tfvars.example" in line


def backend_config(tmp_path: Path) -> Path:
    """A backend.hcl as a user makes it from the example."""
    path = tmp_path / "backend.hcl"
    shutil.copy(ROOT / "deploy/terraform/backend.hcl.example", path)
    return path


def test_terraform_dry_run_needs_a_backend_config(tmp_path: Path) -> None:
    tfvars = tmp_path / "my.tfvars"
    shutil.copy(ROOT / "deploy/terraform.tfvars.example", tfvars)
    result = run_script(
        "scripts/deploy-terraform",
        "--dry-run",
        TFVARS=str(tfvars),
        TF_BACKEND_CONFIG=str(tmp_path / "none.hcl"),
    )
    assert result.returncode != 0 and "+ terraform" not in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert "none.hcl not found" in line and "backend.hcl.example" in line
    assert "versioned GCS bucket" in line and "TF_BACKEND_CONFIG" in line


def test_deploy_root_state_is_in_gcs() -> None:
    with (ROOT / "deploy/terraform/versions.tf").open() as f:
        (terraform,) = hcl2.load(f)["terraform"]
    assert [next(iter(b)).strip('"') for b in terraform["backend"]] == ["gcs"]
    with (ROOT / "deploy/terraform/backend.hcl.example").open() as f:
        example = hcl2.load(f)
    assert {k for k in example if not k.startswith("__")} == {"bucket", "prefix"}
    assert "versioning" in (ROOT / "deploy/terraform/backend.hcl.example").read_text()


def test_terraform_dry_run_stops_before_apply(tmp_path: Path) -> None:
    tfvars = tmp_path / "my.tfvars"
    shutil.copy(ROOT / "deploy/terraform.tfvars.example", tfvars)
    build = tmp_path / "build"
    backend = backend_config(tmp_path)
    result = run_script(
        "scripts/deploy-terraform",
        "--dry-run",
        TFVARS=str(tfvars),
        BUILD_DIR=str(build),
        TF_BACKEND_CONFIG=str(backend),
    )
    assert result.returncode == 0, result.stderr
    cmds = commands(result.stdout)
    tf = [c for c in cmds if c[0] == "terraform"]
    assert [c[2] for c in tf] == ["init", "apply"]
    assert f"-backend-config={backend}" in tf[0]
    assert f"-var-file={tfvars}" in tf[1] and f"-var=build_dir={build}" in tf[1]
    assert (build / "functions/ingress/pubsub_toolkit").is_dir()
    # Terraform owns the push subscriptions: nothing is patched after apply. gcloud only looks
    # up what a destroyed deployment left behind (test_deploy_round_two.py).
    assert all(c[0] != "gcloud" or "describe" in c for c in cmds)
    assert "stopped before terraform init/apply" in result.stdout
    assert not (ROOT / "deploy/terraform/.terraform").exists()


def test_deploy_root_passes_module_variables_that_exist() -> None:
    """deploy/terraform/main.tf passes only real module inputs and every required one."""
    with (TF / "variables.tf").open() as f:
        module_vars = {k.strip('"'): v for d in hcl2.load(f)["variable"] for k, v in d.items()}
    with (ROOT / "deploy/terraform/main.tf").open() as f:
        (block,) = hcl2.load(f)["module"]
    # python-hcl2 also returns the block's comments and markers as __dunder__ keys.
    passed = {k for k in block['"pubsub_toolkit"'] if k != "source" and not k.startswith("__")}
    required = {k for k, v in module_vars.items() if "default" not in v}
    assert passed <= set(module_vars), passed - set(module_vars)
    assert required <= passed, required - passed
    example = (ROOT / "deploy/terraform.tfvars.example").read_text()
    with (ROOT / "deploy/terraform/variables.tf").open() as f:
        root_vars = {k.strip('"'): v for d in hcl2.load(f)["variable"] for k, v in d.items()}
    # The example sets every variable without a default (uncommented) and mentions the rest.
    for name, spec in root_vars.items():
        pattern = rf"^{name}\s*=" if "default" not in spec else rf"^#?\s*{name}\s*="
        if name not in {"build_dir", "relay_image"}:  # set by the script, not by the user
            assert re.search(pattern, example, re.M), f"{name} missing from the tfvars example"


# The module's inputs `make deploy` leaves at the module's default on purpose: the script looks
# the queue and the database up by their default names (to adopt what a destroyed deployment
# left behind, deploy/terraform/imports.tf), so renaming them there is not supported.
NOT_IN_DEPLOY_ROOT = {"tasks_queue_name", "firestore_database"}


def object_attributes(type_expr: str) -> set[str]:
    """The attribute names of an ``object({...})`` (or ``map(object({...}))``) type, as hcl2
    renders it; empty for any other type."""
    inner = re.search(r"object\(\{(.*)\}\)", type_expr, re.S)
    return set(re.findall(r"(?:^|,)\s*([a-z_]+)\s*=", inner.group(1))) if inner else set()


def test_deploy_root_reaches_every_module_input() -> None:
    """A tfvars file for `make deploy` can set whatever the module takes (and the docs name).

    Terraform only warns about a value for a variable the root does not declare, and silently
    drops an object attribute its type lacks: found on a trial deploy, `exactly_once_delivery`,
    `ingress_message_ordering` and `tasks_target` (docs/how-to/deploy.md), the consumer's
    `extra_env` (its PUBSUB_TOOLKIT_FIFO_* settings) and `relay.service` (needed for a second,
    prefixed deployment) were ignored by `make deploy`, while the gcloud script takes all of them.
    """
    with (TF / "variables.tf").open() as f:
        module_vars = {k.strip('"'): v for d in hcl2.load(f)["variable"] for k, v in d.items()}
    with (ROOT / "deploy/terraform/variables.tf").open() as f:
        root_vars = {k.strip('"'): v for d in hcl2.load(f)["variable"] for k, v in d.items()}
    with (ROOT / "deploy/terraform/main.tf").open() as f:
        (block,) = hcl2.load(f)["module"]
    passed = {k for k in block['"pubsub_toolkit"'] if k != "source" and not k.startswith("__")}
    problems = []
    for name, spec in module_vars.items():
        if name in NOT_IN_DEPLOY_ROOT:
            assert name not in passed, f"{name} is passed: drop it from NOT_IN_DEPLOY_ROOT"
            continue
        if name not in passed or name not in root_vars:
            problems.append(f"{name}: not declared by deploy/terraform and passed to the module")
            continue
        root = root_vars[name]
        missing = object_attributes(spec["type"]) - object_attributes(root.get("type", ""))
        if missing:
            problems.append(f"{name}: deploy/terraform's type lacks {sorted(missing)}")
        elif "default" in spec and "default" in root and root["default"] != spec["default"]:
            module_default = spec["default"]
            problems.append(f"{name}: default {root['default']!r}, the module's {module_default!r}")
    assert not problems, "\n".join(problems)
    # Every variable the deploy page's tfvars block shows is one the root declares.
    page = (ROOT / "docs/how-to/deploy.md").read_text()
    (tfvars,) = re.findall(r"The tfvars file:\n\n```hcl\n(.*?)```", page, re.S)
    shown = set(re.findall(r"^#?\s*([a-z_]+)\s+=", tfvars, re.M))
    assert shown <= set(root_vars), shown - set(root_vars)


def test_status_page_docs_name_the_deployed_subscriptions() -> None:
    """An operator pointing the status page at a deployed stack learns which subscriptions to
    name: the defaults (`origin-to-ingress`, `final-sub`) are the local stack's, and the deploy
    paths create `[prefix]ingress-push` (and, with the consumer function, `consumer-push`
    instead of `final-sub`). Found on a trial deploy: both pages still said to use an Eventarc
    trigger's subscription, which neither deploy path creates any more."""
    push = (TF / "push.tf").read_text()
    assert 'name    = "${local.prefix}${each.key}-push"' in push  # ingress-push, consumer-push
    settings = (ROOT / "docs/reference/settings.md").read_text()
    operate = (ROOT / "docs/how-to/operate.md").read_text()
    (origin_row,) = [
        line for line in settings.splitlines() if line.startswith("| `PUBSUB_TOOLKIT_ORIGIN_SUB")
    ]
    (final_row,) = [
        line for line in settings.splitlines() if line.startswith("| `PUBSUB_TOOLKIT_FINAL_SUB")
    ]
    (paragraph,) = [p for p in operate.split("\n\n") if "PUBSUB_TOOLKIT_ORIGIN_SUBSCRIPTION" in p]
    for text in (origin_row, paragraph):
        assert "Eventarc" not in text and "ingress-push" in text, text
    for text in (final_row, paragraph):
        assert "consumer-push" in text, text


# --- shell hygiene ---------------------------------------------------------------------------


@pytest.mark.parametrize("script", [*SCRIPTS, "deploy/lib.sh"])
def test_scripts_parse_and_pass_shellcheck(script: str) -> None:
    path = ROOT / script
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    if script != "deploy/lib.sh":
        assert "set -euo pipefail" in path.read_text()
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: apt-get install shellcheck (make system-deps)"
    result = subprocess.run(
        [shellcheck, "-x", str(path)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def assert_gcloud_parses(cmds: list[list[str]], tmp_path: Path) -> None:
    """Each printed gcloud command goes through gcloud's own argument parser (no credentials: it
    stops at authentication). gcloud exits 2 on a bad flag or value, e.g. a URL where a flag
    wants `key:value` pairs, which no dry-run comparison would notice."""
    sdk = shutil.which("gcloud")
    assert sdk, "gcloud (the Cloud SDK, where the emulators come from) is required"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),  # empty: no account, no project
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",  # never probe a metadata server
    }

    def parse(cmd: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        proc = subprocess.run(
            [sdk, *cmd[1:]], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        return cmd, proc

    # A wait_until's probe (deploy/lib.sh: wait_until DESCRIPTION TRIES SECONDS cmd...) too.
    gcloud_cmds = [c for c in cmds if c[0] == "gcloud"]
    gcloud_cmds += [c[4:] for c in cmds if c[0] == "wait_until" and c[4] == "gcloud"]
    assert gcloud_cmds, "no gcloud command printed"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(parse, gcloud_cmds))
    refused = [
        f"{shlex.join(cmd)}\n  -> {proc.stderr.strip().splitlines()[0]}"
        for cmd, proc in results
        if proc.returncode == 2 or "argument" in proc.stderr.lower()
    ]
    assert not refused, "gcloud rejected its arguments:\n" + "\n".join(refused)
    # And they really reached the point after parsing: the missing credentials.
    assert all(proc.returncode == 1 for _, proc in results), [
        (shlex.join(c), p.returncode, p.stderr[-300:]) for c, p in results if p.returncode != 1
    ]


def test_every_gcloud_command_parses_with_the_installed_sdk(
    gcloud_dry_run: tuple, tmp_path: Path
) -> None:
    cmds, _ = gcloud_dry_run
    assert len([c for c in cmds if c[0] == "gcloud"]) > 30
    assert_gcloud_parses(cmds, tmp_path)


def test_the_relay_knows_the_queue_s_retry_budget(gcloud_dry_run: tuple) -> None:
    """Issue 24, defect 9: the relay dead-letters on the queue's last attempt only if it knows
    which attempt is the last - the queue's --max-attempts, passed as
    PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS."""
    cmds, build = gcloud_dry_run
    (queue,) = gcloud(cmds, "tasks", "queues", "create")
    env = load_app_yaml(build / "appengine/relay/app.yaml")["version"]["envVariables"]
    assert env["PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS"] == flag(queue, "max-attempts") == "100"
