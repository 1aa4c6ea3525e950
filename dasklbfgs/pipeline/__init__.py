"""End-to-end pipelines from YAML configs: data, training, evaluation, report."""

from dasklbfgs.pipeline.config import SCHEMA, apply_overrides, load_config, validate_config
from dasklbfgs.pipeline.run import run_pipeline

__all__ = ["SCHEMA", "apply_overrides", "load_config", "run_pipeline", "validate_config"]
