"""Reading a secret's payload from Secret Manager: the deployed parts' Redis URL and CA.

A Memorystore URL carries the instance's AUTH string, so deployments keep it (and the server
CA of an instance with in-transit encryption) in Secret Manager rather than in an environment
variable or Terraform state. The same call works on Cloud Run functions, Cloud Run and App
Engine standard, which has no native secret environment variables.
"""

from __future__ import annotations

from collections.abc import Callable

from pubsub_toolkit._extras import import_optional
from pubsub_toolkit.errors import ConfigurationError

# Reads one secret version's payload by its name (projects/P/secrets/S/versions/V).
SecretReader = Callable[[str], bytes]


def read_secret_manager(version: str) -> bytes:
    """The payload of ``version``, read with the Secret Manager client and the ambient
    credentials; a refusal or a missing secret is a ConfigurationError naming it."""
    secretmanager = import_optional(
        "google.cloud.secretmanager", extra="secrets", needed_by="PUBSUB_TOOLKIT_REDIS_URL_SECRET"
    )
    from google.api_core import exceptions as gexc

    client = secretmanager.SecretManagerServiceClient()
    try:
        response = client.access_secret_version(request={"name": version}, timeout=30)
    except gexc.GoogleAPICallError as exc:
        raise ConfigurationError(f"cannot read secret {version}: {exc}") from exc
    finally:
        client.transport.close()
    return bytes(response.payload.data)
