"""ecomjax: verifiable e-commerce environments for RL on LLM agents, in pure JAX."""

__version__ = "0.1.0"
