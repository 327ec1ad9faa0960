"""Broker and topic configuration, by Kafka's names, types and defaults.

A broker config comes from (highest first) `--config k=v`, `RAFTKA_<NAME>` environment
variables (dots and dashes as underscores, e.g. RAFTKA_LOG_SEGMENT_BYTES), a properties/TOML
file, then the default. A topic config is the topic's own override, else the broker config
it is derived from (`segment.bytes` ← `log.segment.bytes`), else the default. DescribeConfigs
reports every config with its value and source exactly as Kafka's would.

The package keeps the definitions apart from what reads them: `types` (ConfigDef and the
Kafka config types), the table by area (`server_configs`, `log_configs`,
`replication_configs`, `coordinator_configs`, `topic_configs`, assembled in `tables`),
`parsing` (files, environment, per-listener names, topic overrides), and the resolved
configurations `BrokerConfig` and `TopicConfig`. Every name is importable from here.
"""

from __future__ import annotations

from raftka.broker.config.broker_config import DYNAMIC_BROKER_CONFIGS, BrokerConfig
from raftka.broker.config.group_configs import (
    GROUP_CONFIGS,
    GroupConfig,
    validate_group_configs,
)
from raftka.broker.config.log_configs import CLEANUP_POLICIES, COMPRESSION_TYPES
from raftka.broker.config.parsing import (
    ENV_PREFIX,
    LISTENER_PREFIX,
    PER_LISTENER_CONFIGS,
    jaas_config_name,
    load_config_file,
    parse_assignments,
    throttled_replicas,
    validate_topic_configs,
)
from raftka.broker.config.tables import BROKER_CONFIGS, TOPIC_CONFIGS
from raftka.broker.config.topic_config import TopicConfig
from raftka.broker.config.topic_configs import (
    RESTORE_IN_PROGRESS,
    SHARE_DEFAULT_PRIORITY,
    SHARE_DELAY_ENABLE,
    SHARE_DELIVERY_ORDER,
    SHARE_FAIR_KEY,
    SHARE_FAIR_PER_TURN,
    TOPIC_SYNONYMS,
)
from raftka.broker.config.types import (
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigType,
    ConfigValue,
    python_type,
)

__all__ = [
    "BROKER_CONFIGS",
    "BrokerConfig",
    "CLEANUP_POLICIES",
    "COMPRESSION_TYPES",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "ConfigValue",
    "DYNAMIC_BROKER_CONFIGS",
    "ENV_PREFIX",
    "GROUP_CONFIGS",
    "GroupConfig",
    "INT_MAX",
    "LISTENER_PREFIX",
    "LONG_MAX",
    "PER_LISTENER_CONFIGS",
    "RESTORE_IN_PROGRESS",
    "SHARE_DEFAULT_PRIORITY",
    "SHARE_DELAY_ENABLE",
    "SHARE_DELIVERY_ORDER",
    "SHARE_FAIR_KEY",
    "SHARE_FAIR_PER_TURN",
    "TOPIC_CONFIGS",
    "TOPIC_SYNONYMS",
    "TopicConfig",
    "jaas_config_name",
    "load_config_file",
    "parse_assignments",
    "python_type",
    "throttled_replicas",
    "validate_group_configs",
    "validate_topic_configs",
]
