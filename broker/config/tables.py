"""The config tables by name, in the order DescribeConfigs lists them: every broker config
(by area, see the `*_configs` modules) and every topic config."""

from __future__ import annotations

from raftka.broker.config.coordinator_configs import COORDINATOR_CONFIGS
from raftka.broker.config.kraft_configs import KRAFT_CONFIGS
from raftka.broker.config.log_configs import LOG_RETENTION_CONFIGS, LOG_STORAGE_CONFIGS
from raftka.broker.config.replication_configs import REPLICATION_CONFIGS
from raftka.broker.config.server_configs import SERVER_CONFIGS
from raftka.broker.config.topic_configs import TOPIC_CONFIG_DEFS
from raftka.broker.config.types import ConfigDef


def _defs(*items: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in items}


BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    *SERVER_CONFIGS,
    *LOG_RETENTION_CONFIGS,
    *REPLICATION_CONFIGS,
    *LOG_STORAGE_CONFIGS,
    *COORDINATOR_CONFIGS,
    *KRAFT_CONFIGS,
)

TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(*TOPIC_CONFIG_DEFS)
