"""rig.instrument.metrics.config: the metrics contract (endpoint, who serves the node, where ranks publish)
and where compose and the PyTorchJob publish it."""

from __future__ import annotations

import pytest
from rig.errors import RigError
from rig.instrument.metrics import config


# ------------------------------------------------------------------------------------- the contract
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, config.Endpoint("0.0.0.0", 9464)),
        ({"RIG_METRICS_PORT": " 9100 ", "RIG_METRICS_ADDR": "127.0.0.1"}, config.Endpoint("127.0.0.1", 9100)),
        ({"RIG_METRICS_PORT": "0"}, None),
        ({"RIG_METRICS_PORT": ""}, config.Endpoint("0.0.0.0", 9464)),
    ],
)
def test_endpoint_from_the_environment(env: dict[str, str], expected: config.Endpoint | None) -> None:
    assert config.endpoint(env) == expected


@pytest.mark.parametrize("raw", ["abc", "-1", "65536", "9464.0", "0x10"])
def test_a_port_that_is_none_is_one_line(raw: str) -> None:
    with pytest.raises(
        RigError,
        match=rf"^RIG_METRICS_PORT='{raw}': use a whole number between 0 and 65535 \(default 9464\); .*"
        "0 to serve none$",
    ):
        config.endpoint({"RIG_METRICS_PORT": raw})


@pytest.mark.parametrize(
    ("env", "launcher", "serves"),
    [
        ({"RIG_METRICS_NODE": "1"}, True, True),
        ({"RIG_METRICS_NODE": "1", "LOCAL_RANK": "0"}, True, True),
        ({"RIG_METRICS_NODE": "1"}, False, True),  # the trainer alone (device=cpu)
        ({"RIG_METRICS_NODE": "1", "LOCAL_RANK": "0"}, False, False),  # a rank: the launcher serves
        ({}, True, False),  # rig launch's programs: not rig train
        ({"RIG_METRICS_NODE": "0"}, True, False),
    ],
)
def test_who_serves_the_node(env: dict[str, str], launcher: bool, serves: bool) -> None:
    assert config.serves_node(env, launcher=launcher) is serves


def test_a_foreign_multiprocess_directory_is_not_published_to() -> None:
    assert config.publish_dir({config.MULTIPROC_ENV: "/theirs"}) is None
    assert config.publish_dir(config.publish_env("/ours")) == "/ours"


# --------------------------------------------------------------------------------- where it is served
def test_compose_publishes_metrics_on_the_hosts_loopback_only() -> None:
    import yaml

    from tests.helpers import REPO

    ports = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["workstation"]["ports"]
    assert [p for p in ports if p.endswith(":9464")] == ["127.0.0.1:${METRICS_PORT:-9464}:9464"]


def test_the_pytorchjob_declares_the_port_and_the_scrape_annotations() -> None:
    import yaml

    from tests.helpers import REPO

    job = yaml.safe_load((REPO / "deploy/pytorchjob.yaml").read_text())
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]
        assert pod["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/path": "/metrics",
        }  # fmt: skip
        assert {"name": "metrics", "containerPort": 9464} in pod["spec"]["containers"][0]["ports"]
