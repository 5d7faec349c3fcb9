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


@functools.cache
def _parse(files: tuple[tuple[Path, int, int], ...]) -> dict[str, dict[str, Any]]:
    parsed = {}
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


def functions_are_triggered_by_their_topics(tf_dir: Path) -> Problems:
    """ingress listens on origin and consumer on final, through the function's event_trigger."""
    module = load(tf_dir)
    functions = "".join(
        _text(entry.get("functions", ""))
        for entry in module.get("functions.tf", {}).get("locals", [])
    )
    problems = []
    for function, topic in (("ingress", "origin"), ("consumer", "final")):
        # A flat object literal: `ingress = {name = ..., trigger_topic = "origin", ...}`.
        entry = re.search(rf"\b{function} = \{{([^{{}}]*)\}}", functions)
        if entry is None or f'trigger_topic = "{topic}"' not in entry.group(1):
            problems.append(f'functions.tf: {function} must have trigger_topic = "{topic}"')
    triggers = [
        _text(trigger.get("pubsub_topic", ""))
        for _, rtype, _, body in _resources(tf_dir)
        if rtype == "google_cloudfunctions2_function"
        for trigger in body.get("event_trigger", [])
    ]
    if triggers != ["google_pubsub_topic.this[each.value.trigger_topic].id"]:
        problems.append(
            f"functions.tf: event_trigger.pubsub_topic must follow trigger_topic: {triggers}"
        )
    topics = {}
    for entry in module.get("main.tf", {}).get("locals", []):
        topics.update(entry.get("topics", {}))
    if _text(topics.get("origin", "")) != "var.topics.origin":
        problems.append("main.tf: local.topics.origin must be var.topics.origin")
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


CHECKS: dict[str, Callable[[Path], Problems]] = {
    "variables_are_typed_and_described": variables_are_typed_and_described,
    "outputs_are_described": outputs_are_described,
    "providers_are_bounded": providers_are_bounded,
    "no_primitive_roles": no_primitive_roles,
    "subscriptions_dead_letter": subscriptions_dead_letter,
    "functions_are_triggered_by_their_topics": functions_are_triggered_by_their_topics,
    "firestore_ttl_is_on_expire_at": firestore_ttl_is_on_expire_at,
}


def all_problems(tf_dir: Path, repo_root: Path | None = None) -> Problems:
    """Every convention's problems; the app.yaml comparison when the repository is at hand."""
    problems = [problem for check in CHECKS.values() for problem in check(tf_dir)]
    if repo_root is not None:
        problems += relay_mirrors_app_yaml(tf_dir, repo_root / APP_YAML)
        problems += cloud_run_relay_mirrors_app_yaml(tf_dir, repo_root / APP_YAML)
    return problems
