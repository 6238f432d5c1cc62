"""Reports: renderings of results for people (rich terminal) and for tools (JSON)."""
