"""Conventions of the Terraform module, checked on its HCL with python-hcl2.

Each check takes the module's folder (``terraform/`` or a copy of it) and returns a list of
problems, empty when the convention holds, so that ``test_structure.py`` can assert it on the
module and ``test_checks_catch_breakage.py`` can prove it fails on a broken copy. Only the
module's own ``*.tf`` files are read (not ``examples/`` or ``tests/``).

python-hcl2 keeps HCL's quoting: string literals come back as ``'"text"'`` and expressions as
``'${expr}'``, block labels as ``'"name"'``; ``_text`` strips either wrapping.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hcl2

PRIMITIVE_ROLES = ("roles/owner", "roles/editor", "roles/viewer")
# The terminal subscription on the dead-letter topic (pubsub.tf): a dead-letter policy there
# could only point at its own topic, and `dlq list` nacks, so it is exempt by name.
EXEMPT_SUBSCRIPTION = "dead_letter"
DEAD_LETTER_TOPIC_REF = 'google_pubsub_topic.this["dead_letter"]'
APP_YAML = Path("appengine/relay/app.yaml")  # relative to the repository root

Problems = list[str]


def _text(value: Any) -> str:
    """A literal or expression without its HCL wrapping: '"x"' -> 'x', '${x}' -> 'x'."""
    text = str(value)
    if text.startswith("${") and text.endswith("}"):
        return text[2:-1]
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def load(tf_dir: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.tf`` file of the module, parsed, by file name."""
    files = sorted(tf_dir.glob("*.tf"))
    # Parsing is the slow part (~0.3 s) and every check needs it: parse each version once.
    return _parse(tuple((path, path.stat().st_mtime_ns, path.stat().st_size) for path in files))


# python-hcl2's parser is shared module state: two threads parsing at once (iac.run_many runs
# checks two at a time) can hand one of them a wrongly shaped tree.
_PARSE_LOCK = threading.Lock()


@functools.cache
def _parse(files: tuple[tuple[Path, int, int], ...]) -> dict[str, dict[str, Any]]:
    parsed = {}
    with _PARSE_LOCK:
        for path, _, _ in files:
            with path.open() as handle:
                parsed[path.name] = hcl2.load(handle)
    return parsed


def _blocks(tf_dir: Path, kind: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(file, label, body) of every one-label block (variable, output) of ``kind``."""
    for file, doc in load(tf_dir).items():
        for entry in doc.get(kind, []):
            for label, body in entry.items():
                yield file, _text(label), body


def _resources(tf_dir: Path, kind: str = "resource") -> Iterator[tuple[str, str, str, dict]]:
    """(file, type, name, body) of every resource (or data source) block."""
    for file, doc in load(tf_dir).items():
        for entry in doc.get(kind, []):
            for rtype, named in entry.items():
                for name, body in named.items():
                    yield file, _text(rtype), _text(name), body


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a parsed value (attributes, nested blocks, lists)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def variables_are_typed_and_described(tf_dir: Path) -> Problems:
    problems = []
    for file, name, body in _blocks(tf_dir, "variable"):
        if not _text(body.get("type", "")).strip():
            problems.append(f"{file}: variable {name} has no type")
        if not _text(body.get("description", "")).strip():
            problems.append(f"{file}: variable {name} has no description")
    return problems


def outputs_are_described(tf_dir: Path) -> Problems:
    return [
        f"{file}: output {name} has no description"
        for file, name, body in _blocks(tf_dir, "output")
        if not _text(body.get("description", "")).strip()
    ]


def _bounded_both_ways(constraint: str) -> bool:
    return ">=" in constraint and re.search(r"<(?!=)", constraint) is not None


def providers_are_bounded(tf_dir: Path) -> Problems:
    """versions.tf pins terraform and every provider the module uses with a floor and a ceiling."""
    settings = load(tf_dir).get("versions.tf", {}).get("terraform", [])
    if len(settings) != 1:
        return ["versions.tf: expected exactly one terraform block"]
    problems = []
    if not _bounded_both_ways(_text(settings[0].get("required_version", ""))):
        problems.append("versions.tf: required_version needs both >= and <")
    declared = {}
    for entry in settings[0].get("required_providers", []):
        declared.update({k: v for k, v in entry.items() if isinstance(v, dict)})
    for name, spec in declared.items():
        if not _text(spec.get("source", "")).startswith("hashicorp/"):
            problems.append(f"versions.tf: provider {name} has no hashicorp/ source")
        if not _bounded_both_ways(_text(spec.get("version", ""))):
            problems.append(f"versions.tf: provider {name} version needs both >= and <")
    used = {
        rtype.split("_", 1)[0]
        for kind in ("resource", "data")
        for _, rtype, _, _ in _resources(tf_dir, kind)
    }
    problems += [
        f"versions.tf: provider {p} is used but not required" for p in used - set(declared)
    ]
    return problems


# Arguments newer than some provider releases: (provider, first release that has it). An older
# provider refuses the argument even when its value is null (versions.tf explains the floor).
ARGUMENT_FLOORS = {
    "direct_vpc_egress": ("google", (7, 21)),
    "direct_vpc_network_interface": ("google", (7, 21)),
    "invoker_iam_disabled": ("google", (6, 8)),
}
# The files whose provider floors must cover the module's arguments, relative to the module.
FLOOR_FILES = (Path("versions.tf"), Path("examples/minimal/versions.tf"))


def _floor(constraint: str) -> tuple[int, ...] | None:
    found = re.search(r">=\s*(\d+(?:\.\d+)*)", constraint)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def provider_floors_problems(versions_tf: Path, tf_dir: Path) -> Problems:
    """``versions_tf`` (the module's, the example's, the deploy root's) requires each provider at
    least at the release that brought the newest argument the module's *.tf set."""
    text = "\n".join(path.read_text() for path in sorted(tf_dir.glob("*.tf")))
    with _PARSE_LOCK, versions_tf.open() as handle:  # the parser is shared (see _PARSE_LOCK)
        settings = hcl2.load(handle).get("terraform", [{}])[0]
    declared: dict[str, str] = {}
    for entry in settings.get("required_providers", []):
        declared.update(
            {k: _text(v.get("version", "")) for k, v in entry.items() if isinstance(v, dict)}
        )
    problems = []
    for argument, (provider, release) in ARGUMENT_FLOORS.items():
        if not re.search(rf"\b{argument}\b", text) or provider not in declared:
            continue
        floor = _floor(declared[provider])
        if floor is None or floor < release:
            wanted = ".".join(map(str, release))
            problems.append(
                f"{versions_tf.name}: {provider} {declared[provider]!r} allows releases without"
                f" {argument} (needs >= {wanted})"
            )
    return problems


def provider_floors_cover_the_arguments(tf_dir: Path) -> Problems:
    return [
        f"{relative.parent / problem}" if relative.parent != Path(".") else problem
        for relative in FLOOR_FILES
        if (tf_dir / relative).is_file()
        for problem in provider_floors_problems(tf_dir / relative, tf_dir)
    ]


def no_primitive_roles(tf_dir: Path) -> Problems:
    """No resource or data block mentions a primitive role, in `role` or in a for_each list."""
    problems = []
    for kind in ("resource", "data"):
        for file, rtype, name, body in _resources(tf_dir, kind):
            for text in _strings(body):
                problems += [
                    f"{file}: {rtype}.{name} grants {role}"
                    for role in PRIMITIVE_ROLES
                    if re.search(re.escape(role) + r"\b", text)
                ]
    return problems


def subscriptions_dead_letter(tf_dir: Path) -> Problems:
    """Every subscription dead-letters to the dead-letter topic, bar the terminal one on it."""
    problems = []
    for file, rtype, name, body in _resources(tf_dir):
        if rtype != "google_pubsub_subscription":
            continue
        reads_dead_letter = DEAD_LETTER_TOPIC_REF in _text(body.get("topic", ""))
        if name == EXEMPT_SUBSCRIPTION:
            if not reads_dead_letter:
                problems.append(f"{file}: {rtype}.{name} is exempt only on the dead-letter topic")
            continue
        policies = body.get("dead_letter_policy", [])
        targets = [_text(p.get("dead_letter_topic", "")) for p in policies]
        if len(targets) != 1 or DEAD_LETTER_TOPIC_REF not in targets[0]:
            problems.append(
                f"{file}: {rtype}.{name} has no dead_letter_policy to the dead-letter topic"
            )
    return problems


def functions_are_pushed_from_their_topics(tf_dir: Path) -> Problems:
    """ingress listens on origin and consumer on final, through the push subscription we own
    (push.tf), never through an Eventarc trigger (whose subscription had no dead-letter policy)."""
    module = load(tf_dir)
    functions = "".join(
        _text(entry.get("functions", ""))
        for entry in module.get("functions.tf", {}).get("locals", [])
    )
    problems = []
    for function, topic in (("ingress", "origin"), ("consumer", "final")):
        # An object literal: `ingress = {name = "${...}", ..., trigger_topic = "origin", ...}`
        # (its name interpolates, so it is read up to the first `}` outside "${...}").
        entry = re.search(rf"\b{function} = \{{((?:\$\{{[^}}]*\}}|[^{{}}])*)\}}", functions)
        if entry is None or f'trigger_topic = "{topic}"' not in entry.group(1):
            problems.append(f'functions.tf: {function} must have trigger_topic = "{topic}"')
    for file, rtype, name, body in _resources(tf_dir):
        if rtype == "google_cloudfunctions2_function" and body.get("event_trigger"):
            problems.append(f"{file}: {rtype}.{name} has an event_trigger (Eventarc)")
    pushes = [
        _text(body.get("topic", ""))
        for _, rtype, name, body in _resources(tf_dir)
        if rtype == "google_pubsub_subscription" and name == "push"
    ]
    if pushes != ["google_pubsub_topic.this[each.value.trigger_topic].id"]:
        problems.append(
            f"push.tf: the push subscription's topic must follow trigger_topic: {pushes}"
        )
    topics = {}
    for entry in module.get("main.tf", {}).get("locals", []):
        topics.update(entry.get("topics", {}))
    if _text(topics.get("origin", "")) != "${local.prefix}${var.topics.origin}":
        problems.append("main.tf: local.topics.origin must be var.topics.origin behind the prefix")
    return problems


def firestore_ttl_is_on_expire_at(tf_dir: Path) -> Problems:
    """The library writes `expire_at`; a TTL policy on any other field never deletes records."""
    fields = [(f, n, b) for f, t, n, b in _resources(tf_dir) if t == "google_firestore_field"]
    if not fields:
        return ["no google_firestore_field: the dedup records need a TTL policy"]
    problems = []
    for file, name, body in fields:
        if _text(body.get("field", "")) != "expire_at":
            problems.append(f"{file}: google_firestore_field.{name} field must be expire_at")
        if len(body.get("ttl_config", [])) != 1:
            problems.append(f"{file}: google_firestore_field.{name} needs a ttl_config block")
    return problems


def relay_mirrors_app_yaml(tf_dir: Path, app_yaml: Path) -> Problems:
    """var.relay's defaults equal appengine/relay/app.yaml (README: keep them in step)."""
    relay = next((body for _, name, body in _blocks(tf_dir, "variable") if name == "relay"), None)
    if relay is None:
        return ["variables.tf: variable relay is missing"]
    # `name = optional(type, default)`: the default is a quoted string or a number.
    optional = r'(\w+) = optional\(\w+, "?(.*?)"?\)(?=, \w+ = |\}\)$)'
    defaults = dict(re.findall(optional, _text(relay["type"])))
    # app.yaml's scalars, without a YAML parser: `key: value` at any indentation.
    yaml = dict(re.findall(r"^\s*(\w+): (\S.*)$", app_yaml.read_text(), re.MULTILINE))
    pairs = {
        "service": "service",
        "runtime": "runtime",
        "instance_class": "instance_class",
        "entrypoint": "entrypoint",
        "min_instances": "min_instances",
        "max_instances": "max_instances",
        "max_concurrent": "max_concurrent_requests",
    }
    return [
        f"variables.tf: relay.{hcl} = {defaults.get(hcl)!r} but app.yaml {key} = {yaml.get(key)!r}"
        for hcl, key in pairs.items()
        if defaults.get(hcl) is None or defaults.get(hcl) != yaml.get(key)
    ]


def _optional_defaults(tf_dir: Path, variable: str) -> dict[str, str] | None:
    """``name = optional(type, default)`` defaults of an object variable (None if it is absent)."""
    body = next((b for _, name, b in _blocks(tf_dir, "variable") if name == variable), None)
    if body is None:
        return None
    optional = r'(\w+) = optional\(\w+, "?(.*?)"?\)(?=, \w+ = |\}\)$)'
    return dict(re.findall(optional, _text(body["type"])))


def cloud_run_relay_mirrors_app_yaml(tf_dir: Path, app_yaml: Path) -> Problems:
    """var.cloud_run_relay's scaling equals app.yaml's, and its concurrency and request timeout
    are gunicorn's threads and --timeout there (the Dockerfile runs the same gunicorn command,
    tests/deploy/test_cloud_run_relay.py): more concurrent requests than threads would queue
    inside gunicorn, where Cloud Run cannot see them to scale."""
    defaults = _optional_defaults(tf_dir, "cloud_run_relay")
    if defaults is None:
        return ["variables.tf: variable cloud_run_relay is missing"]
    text = app_yaml.read_text()
    yaml = dict(re.findall(r"^\s*(\w+): (\S.*)$", text, re.MULTILINE))
    entrypoint = yaml.get("entrypoint", "")
    gunicorn = dict(re.findall(r"--(threads|timeout) (\d+)", entrypoint))
    pairs = {
        "min_instances": ("min_instances", yaml.get("min_instances")),
        "max_instances": ("max_instances", yaml.get("max_instances")),
        "concurrency": ("gunicorn --threads", gunicorn.get("threads")),
        "timeout_seconds": ("gunicorn --timeout", gunicorn.get("timeout")),
    }
    return [
        f"variables.tf: cloud_run_relay.{hcl} = {defaults.get(hcl)!r}, app.yaml {what} = {value!r}"
        for hcl, (what, value) in pairs.items()
        if defaults.get(hcl) is None or defaults.get(hcl) != value
    ]


def _depends_on(body: dict[str, Any]) -> list[str]:
    return [_text(item) for entry in body.get("depends_on", []) for item in _as_list(entry)]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _resource(tf_dir: Path, rtype: str, name: str) -> tuple[str, dict[str, Any]] | None:
    return next(((f, b) for f, t, n, b in _resources(tf_dir) if (t, n) == (rtype, name)), None)


def waits_before_use(tf_dir: Path) -> Problems:
    """What Google documents as eventually consistent is waited for (identities.tf): builds
    after the build identities' grants, alerts after their log metrics, grants to service agents
    after the agents exist. Ordering is not a value: `terraform test` cannot see it."""
    problems = []
    sleeps = {n: b for _, t, n, b in _resources(tf_dir) if t == "time_sleep"}
    for name in ("service_identities", "build_iam", "log_metrics"):
        if name not in sleeps:
            problems.append(f"no time_sleep.{name}")
    if "build_iam" in sleeps:
        triggers = str(sleeps["build_iam"].get("triggers", ""))
        for grant in ("google_project_iam_member.build", "google_project_iam_member.relay_build"):
            if grant not in triggers:
                problems.append(f"time_sleep.build_iam must be triggered by {grant}")
    for file, rtype, name, body in _resources(tf_dir):
        needs = []
        if rtype in ("google_cloudfunctions2_function", "google_app_engine_standard_app_version"):
            needs.append("time_sleep.build_iam")
        text = "\n".join(_strings(body))
        if rtype == "google_monitoring_alert_policy" and "google_logging_metric." in text:
            needs.append("time_sleep.log_metrics")
        if rtype.endswith("_iam_member") and "local.pubsub_service_agent" in _text(
            body.get("member", "")
        ):
            needs.append("time_sleep.service_identities")
        if rtype.endswith("_iam_member") and "local.app_engine_service_agent" in text:
            needs.append("time_sleep.app_engine_service_agent")
        # The queue's OIDC override names the tasks-invoker account created in the same apply.
        if rtype == "google_cloud_tasks_queue" and 'component["tasks-invoker"]' in text:
            needs.append("time_sleep.service_identities")
        problems += [
            f"{file}: {rtype}.{name} must depend_on {need}"
            for need in needs
            if need not in _depends_on(body)
        ]
    identity = _resource(tf_dir, "google_project_service_identity", "pubsub")
    if identity is None or _text(identity[1].get("provider", "")) != "google-beta":
        problems.append(
            "identities.tf: google_project_service_identity.pubsub (google-beta) is missing"
        )
    return problems


def function_builds_read_gcf_sources(tf_dir: Path) -> Problems:
    """The build account reads gcf-v2-sources-NUMBER-REGION, where Cloud Functions copies the
    uploaded source before the build fetches it (provider #20571), and the functions wait for
    that grant like the other build grants."""
    bucket = "gcf-v2-sources-${data.google_project.this.number}-${var.region}"
    named = bucket in "\n".join(path.read_text() for path in tf_dir.glob("*.tf"))
    grants = [
        name
        for _, rtype, name, body in _resources(tf_dir)
        if rtype == "google_project_iam_member"
        and _text(body.get("role", "")) == "roles/storage.objectViewer"
        and 'component["build"]' in _text(body.get("member", ""))
        and "gcf_sources" in str(body.get("condition", ""))
    ]
    if not (grants and named):
        return [
            f"iam.tf: the build account must read {bucket} (project-level"
            " storage.objectViewer with a condition naming local.gcf_sources_bucket)"
        ]
    sleep = _resource(tf_dir, "time_sleep", "build_iam")
    triggers = str(sleep[1].get("triggers", "")) if sleep else ""
    return [
        f"time_sleep.build_iam must be triggered by google_project_iam_member.{name}"
        for name in grants
        if f"google_project_iam_member.{name}" not in triggers
    ]


def ttl_fields_follow_the_database(tf_dir: Path) -> Problems:
    """The TTL fields wait for whatever creates the database (this module's, or the App Engine
    application's (default)) and refuse a plan where nothing does."""
    found = _resource(tf_dir, "google_firestore_field", "ttl")
    if found is None:
        return ["no google_firestore_field.ttl"]
    file, body = found
    problems = [
        f"{file}: google_firestore_field.ttl must depend_on {creator}"
        for creator in ("google_firestore_database.this", "google_app_engine_application.app")
        if creator not in _depends_on(body)
    ]
    preconditions = [
        c for entry in body.get("lifecycle", []) for c in entry.get("precondition", [])
    ]
    if not preconditions:
        problems.append(
            f"{file}: google_firestore_field.ttl needs a precondition that the database will exist"
        )
    return problems


def app_engine_uses_firestore(tf_dir: Path) -> Problems:
    """The App Engine application declares a Firestore-native database and waits for the one the
    module creates (else it may create a Datastore-mode (default) or race it: 409)."""
    found = _resource(tf_dir, "google_app_engine_application", "app")
    if found is None:
        return ["no google_app_engine_application.app"]
    file, body = found
    problems = []
    app = f"{file}: google_app_engine_application.app"
    if _text(body.get("database_type", "")) != "CLOUD_FIRESTORE":
        problems.append(f"{app} needs database_type = CLOUD_FIRESTORE")
    if "google_firestore_database.this" not in _depends_on(body):
        problems.append(f"{app} must depend_on google_firestore_database.this")
    return problems


# Resources whose name must carry the deployment's prefix (local.prefix), by name attribute.
PREFIXED = {
    "google_pubsub_subscription": "name",
    "google_cloud_tasks_queue": "name",
    "google_storage_bucket": "name",
    "google_logging_metric": "name",
    "google_cloud_scheduler_job": "name",
    "google_monitoring_alert_policy": "display_name",
    "google_service_account": "account_id",
}


def names_carry_the_prefix(tf_dir: Path) -> Problems:
    """Every name the module gives carries name_prefix, so deployments can share a project."""
    problems = []
    for file, rtype, name, body in _resources(tf_dir):
        attribute = PREFIXED.get(rtype)
        if attribute is None:
            continue
        value = _text(body.get(attribute, ""))
        if not re.search(r"local\.(prefix|sa_prefix|alert_prefix)\b", value):
            problems.append(
                f"{file}: {rtype}.{name} {attribute} does not carry local.prefix: {value}"
            )
    module = load(tf_dir)
    for file, key in (("main.tf", "topics"), ("functions.tf", "functions")):
        text = str([entry.get(key, "") for entry in module.get(file, {}).get("locals", [])])
        if "local.prefix" not in text:
            problems.append(f"{file}: local.{key} names do not carry local.prefix")
    return problems


def alerts_notify_the_channels(tf_dir: Path) -> Problems:
    """Every alert policy notifies local.notification_channels (the given ones + alert_email)."""
    return [
        f"{file}: {rtype}.{name} must notify local.notification_channels"
        for file, rtype, name, body in _resources(tf_dir)
        if rtype == "google_monitoring_alert_policy"
        and _text(body.get("notification_channels", "")) != "local.notification_channels"
    ]


def no_redis_url_in_env(tf_dir: Path) -> Problems:
    """Redis mode renders PUBSUB_TOOLKIT_REDIS_URL_SECRET (a Secret Manager version): the URL with
    its AUTH string never sits in an environment variable or in state (under its name or its
    former bare one)."""
    problems = []
    for file, doc in load(tf_dir).items():
        for entry in doc.get("locals", []):
            for name, value in entry.items():
                if re.search(r"(?<![A-Z0-9_])(PUBSUB_TOOLKIT_)?REDIS_URL(?![A-Z0-9_])", str(value)):
                    problems.append(f"{file}: local.{name} renders PUBSUB_TOOLKIT_REDIS_URL")
    return problems


CHECKS: dict[str, Callable[[Path], Problems]] = {
    "variables_are_typed_and_described": variables_are_typed_and_described,
    "outputs_are_described": outputs_are_described,
    "providers_are_bounded": providers_are_bounded,
    "no_primitive_roles": no_primitive_roles,
    "subscriptions_dead_letter": subscriptions_dead_letter,
    "functions_are_pushed_from_their_topics": functions_are_pushed_from_their_topics,
    "firestore_ttl_is_on_expire_at": firestore_ttl_is_on_expire_at,
    "waits_before_use": waits_before_use,
    "app_engine_uses_firestore": app_engine_uses_firestore,
    "provider_floors_cover_the_arguments": provider_floors_cover_the_arguments,
    "function_builds_read_gcf_sources": function_builds_read_gcf_sources,
    "ttl_fields_follow_the_database": ttl_fields_follow_the_database,
    "names_carry_the_prefix": names_carry_the_prefix,
    "alerts_notify_the_channels": alerts_notify_the_channels,
    "no_redis_url_in_env": no_redis_url_in_env,
}


def all_problems(tf_dir: Path, repo_root: Path | None = None) -> Problems:
    """Every convention's problems; the app.yaml comparison when the repository is at hand."""
    problems = [problem for check in CHECKS.values() for problem in check(tf_dir)]
    if repo_root is not None:
        problems += relay_mirrors_app_yaml(tf_dir, repo_root / APP_YAML)
        problems += cloud_run_relay_mirrors_app_yaml(tf_dir, repo_root / APP_YAML)
    return problems
