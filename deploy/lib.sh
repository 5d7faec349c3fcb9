# shellcheck shell=bash
# Shared by scripts/deploy-gcloud and scripts/deploy-terraform (sourced, not run).
#
# DRY_RUN=1 (or --dry-run) prints every command that would change or query the cloud, prefixed
# with "+ ", and runs none of them; local steps (building bundles, rendering files) still run so
# their output can be checked. Output is shell-quoted: a printed line can be pasted as is.

DRY_RUN="${DRY_RUN:-0}"

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
    { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
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

# eventarc_dead_letter FUNCTION REGION PROJECT DEAD_LETTER_TOPIC MAX_ATTEMPTS PUBSUB_AGENT
#
# A 2nd-gen function's Pub/Sub trigger is an Eventarc trigger whose push subscription Eventarc
# creates and owns; neither the Functions nor the Eventarc API can give it a dead-letter policy,
# so a message that fails transiently forever would be retried for the whole retention period.
# Pub/Sub does let us update that subscription directly. Its service agent must also be allowed
# to ack on it (subscriber) to forward dead letters. Re-run after every deploy that recreates the
# trigger (a new trigger gets a new subscription).
eventarc_dead_letter() {
  local function="$1" region="$2" project="$3" topic="$4" attempts="$5" agent="$6" trigger sub
  trigger=$(value "<trigger-of-$function>" gcloud functions describe "$function" --gen2 \
    --region="$region" --project="$project" --format='value(eventTrigger.trigger)')
  sub=$(value "<subscription-of-$function>" gcloud eventarc triggers describe "$trigger" \
    --location="$region" --project="$project" --format='value(transport.pubsub.subscription)')
  [[ -n "$sub" ]] || die "no Pub/Sub subscription found behind the trigger of $function"
  run gcloud pubsub subscriptions update "$sub" --project="$project" \
    --dead-letter-topic="$topic" --max-delivery-attempts="$attempts"
  run gcloud pubsub subscriptions add-iam-policy-binding "$sub" --project="$project" \
    --member="$agent" --role=roles/pubsub.subscriber
}
