"""Configuration: parameter introspection and layered resolution with sources."""

from thub.config.fields import ParamInfo, format_value, param_infos, parse_text
from thub.config.resolve import ResolvedConfig, read_config_file, resolve

__all__ = ["ParamInfo", "ResolvedConfig", "format_value", "param_infos", "parse_text", "read_config_file", "resolve"]
