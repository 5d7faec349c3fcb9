# shellcheck shell=bash
# Shared by scripts/deploy-gcloud and scripts/deploy-terraform (sourced, not run).
#
# DRY_RUN=1 (or --dry-run) prints every command that would change or query the cloud, prefixed
# with "+ ", and runs none of them; local steps (building bundles, rendering files) still run so
# their output can be checked. Output is shell-quoted: a printed line can be pasted as is (lines
# starting with `retry` or `wait_until` name the helpers below: source this file first).

DRY_RUN="${DRY_RUN:-0}"
# fd 3 is the script's stdout, also inside $(...): value() prints its query there, so the printed
# plan shows each read in the order it happens.
exec 3>&1

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# require VAR...: every named variable must be set and non-empty; names the first missing one.
require() {
  local name
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || die "environment variable $name is required (see README.md, Deploying)"
  done
}

say() { printf '\n== %s\n' "$*"; }

# run CMD...: print, then execute unless dry-run.
run() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  [[ "$DRY_RUN" == 1 ]] || "$@"
}

# exists CMD...: true when a describe command succeeds. In dry-run nothing exists, so the
# printed plan shows every create: the full topology, as on a fresh project.
exists() {
  [[ "$DRY_RUN" != 1 ]] || return 1
  "$@" >/dev/null 2>&1
}

# value PLACEHOLDER CMD...: a value read from the cloud; in dry-run print the query and return
# PLACEHOLDER so later commands show where the value goes.
value() {
  local placeholder="$1"; shift
  if [[ "$DRY_RUN" == 1 ]]; then
    { printf '+'; printf ' %q' "$@"; printf '\n'; } >&3
    echo "$placeholder"
  else
    "$@"
  fi
}

# tfvar NAME FILE: the string value of a top-level `NAME = "value"` line of a tfvars file, or
# nothing when the file does not set it that way (a value set any other way - an expression, a
# heredoc - is not read: set these as plain strings).
tfvar() {
  sed -nE "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"([^\"]*)\"[[:space:]]*(#.*)?$/\1/p" "$2" | tail -n 1
}

# tree_hash DIR: a short content hash of every file under DIR (names and bytes, sorted), the
# same on any machine for the same files: an image tag that changes exactly when the code does.
tree_hash() {
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
}

# check_gcloud_auth: the deploy needs gcloud with an active account (skipped in dry-run).
check_gcloud_auth() {
  [[ "$DRY_RUN" == 1 ]] && return 0
  command -v gcloud >/dev/null || die "gcloud is not installed (https://cloud.google.com/sdk/docs/install)"
  [[ -n "$(gcloud auth list --filter=status:ACTIVE --format='value(account)' 2>/dev/null)" ]] ||
    die "no active gcloud account: run 'gcloud auth login' (and 'gcloud auth application-default login' for terraform)"
}

# retry TRIES SECONDS CMD...: print, then run CMD up to TRIES times, SECONDS apart, until it
# succeeds (dry-run: print only). For calls that IAM's eventual consistency can fail for a
# while: a binding naming a service account or service agent created a moment ago ("does not
# exist"). Gives up with the command's last error.
retry() {
  local tries="$1" seconds="$2" attempt; shift 2
  printf '+ retry %q %q' "$tries" "$seconds"; printf ' %q' "$@"; printf '\n'
  [[ "$DRY_RUN" != 1 ]] || return 0
  for ((attempt = 1; ; attempt++)); do
    "$@" && return 0
    ((attempt < tries)) || die "gave up after $tries attempts: $*"
    echo "  (attempt $attempt/$tries failed; retrying in ${seconds}s)" >&2
    sleep "$seconds"
  done
}

# wait_until DESCRIPTION TRIES SECONDS CMD...: wait, at most TRIES x SECONDS, until CMD succeeds
# (its output is discarded); dies naming DESCRIPTION when it never does. Google documents these
# delays (e.g. a new service account: "you might need to wait for 60 seconds or more"). Dry-run
# prints the wait and does not sleep.
wait_until() {
  local what="$1" tries="$2" seconds="$3" attempt; shift 3
  printf '+ wait_until %q %q %q' "$what" "$tries" "$seconds"; printf ' %q' "$@"; printf '\n'
  [[ "$DRY_RUN" != 1 ]] || return 0
  for ((attempt = 1; ; attempt++)); do
    "$@" >/dev/null 2>&1 && return 0
    ((attempt < tries)) || die "gave up waiting for $what after $tries x ${seconds}s"
    echo "  (waiting for $what: $attempt/$tries)" >&2
    sleep "$seconds"
  done
}

# settle SECONDS WHAT: wait SECONDS for a change no call can observe (IAM grants reaching every
# service: Google documents "usually within 60 seconds"). Printed as `sleep`; dry-run does not
# sleep.
settle() {
  printf '+ sleep %q\n' "$1"
  echo "  (letting $2 propagate)"
  [[ "$DRY_RUN" == 1 ]] || sleep "$1"
}
