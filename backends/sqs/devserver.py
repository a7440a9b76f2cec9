"""A local fake of SQS and SNS, for ``broker dev sqs`` and the tests: moto's standalone server.

No real SQS runs locally: this is moto (``moto[server]``, the test extra), a fake that answers the
SQS and SNS APIs from memory on 127.0.0.1 and a free port. It is a fake: it keeps nothing across a
restart, checks no queue policy, and counts time in whole seconds as AWS does. Its URL carries
``endpoint_url`` and the fake's fixed credentials. Where moto is importable here it runs through
:mod:`~broker.backends.sqs.motofake`, which locks moto's queues against its own races between
concurrent requests (duplicate receives, a send lost to a delete).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import urllib.request
from pathlib import Path

from broker.driver.devserver import ProcessServer, free_port
from broker.errors import MissingDependency

__all__ = ["FAKE_ACCESS_KEY_ID", "FAKE_SECRET_ACCESS_KEY", "MotoServerNotFound", "moto_dev_server"]

#: The credentials the fake accepts (any, unless its IAM checks are on).
FAKE_ACCESS_KEY_ID = "testing"
FAKE_SECRET_ACCESS_KEY = "testing"


class MotoServerNotFound(MissingDependency):
    """moto's server (``moto[server]``) is not installed."""

    def __init__(self) -> None:
        self.extra = "sqs"
        self.module = "moto_server"
        Exception.__init__(self, "moto's server is not installed: pip install 'moto[server]'")


def _moto_command() -> list[str]:
    if importlib.util.find_spec("moto") is not None:
        # moto's server with its queues locked against concurrent requests (see motofake)
        return [sys.executable, "-m", "broker.backends.sqs.motofake"]
    local = Path(sys.executable).with_name("moto_server")
    if local.exists():
        return [str(local)]
    found = shutil.which("moto_server")
    if found is None:
        raise MotoServerNotFound()
    return [found]


def moto_dev_server(
    port: int | None = None, *, iam_checks: bool = False, host: str = "127.0.0.1"
) -> ProcessServer:
    """An unstarted moto server on ``host`` (127.0.0.1; a free port unless ``port`` is given).

    ``iam_checks`` turns on moto's authentication and authorization checks
    (``INITIAL_NO_AUTH_ACTION_COUNT=0``): requests signed with keys the fake does not know are
    refused as AWS would refuse them.
    """
    command = _moto_command()
    port = port or free_port("127.0.0.1")
    env = {"MOTO_PORT": str(port), "AWS_DEFAULT_REGION": "us-east-1"}
    if iam_checks:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    endpoint = f"http://{host}:{port}"

    def ready() -> None:
        urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()

    url = f"sqs://{FAKE_ACCESS_KEY_ID}:{FAKE_SECRET_ACCESS_KEY}@us-east-1?endpoint_url={endpoint}"
    return ProcessServer(
        [*command, "-H", host, "-p", str(port)], url=url, host=host, port=port, env=env, ready=ready
    )
