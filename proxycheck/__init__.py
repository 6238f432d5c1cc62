"""proxycheck: find which hop of a proxy chain wedges streamed, multi-turn LLM traffic."""

__version__ = "0.1.0"
