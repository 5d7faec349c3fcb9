"""Runs under the Google Cloud SDK's own Python: validate an app.yaml as `gcloud app deploy` does.

    PYTHONPATH=$SDK/lib:$SDK/lib/third_party $SDK_PYTHON app_yaml_check.py path/to/app.yaml

Three steps of the deploy command, none of which needs the network or credentials:
1. yaml_parsing.ServiceYamlInfo.FromFile: parse against the appinfo schema (unknown keys, bad
   values, bad scaling) plus gcloud's own checks (unsupported runtimes, ...);
2. convert_yaml's v1 schema: turn it into the Admin API's Version resource, as the deploy does;
3. apitools: load that JSON into the generated appengine v1 Version message (unknown fields fail).
Prints {"service", "env", "runtime", "version"} as JSON; exits 1 with the SDK's message on error.
"""

import json
import sys

from apitools.base.py import encoding
from googlecloudsdk.api_lib.app import yaml_parsing
from googlecloudsdk.appengine.admin.tools.conversion import convert_yaml
from googlecloudsdk.generated_clients.apis.appengine.v1 import appengine_v1_messages


def main(path: str) -> int:
    try:
        info = yaml_parsing.ServiceYamlInfo.FromFile(path)
        version = convert_yaml.GetSchemaParser("v1").ConvertValue(info.parsed.ToDict())
        encoding.PyValueToMessage(appengine_v1_messages.Version, version)
    except Exception as exc:  # the SDK's errors have no common base worth naming
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "service": info.module,
                "env": info.env.name,
                "runtime": info.runtime,
                "version": version,
            }
        )
    )
    return 0


sys.exit(main(sys.argv[1]))
