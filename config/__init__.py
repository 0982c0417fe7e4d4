"""Chronolog configuration: broker and topic configs with Kafka's property names."""

from config.properties import ConfigError, load_properties, parse_properties
from config.topic_config import ConfigEntry, TopicConfig
from config.broker_config import BrokerConfig, env_var_name, load_broker_config

__all__ = [
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "TopicConfig",
    "env_var_name",
    "load_broker_config",
    "load_properties",
    "parse_properties",
]
