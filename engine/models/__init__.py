"""The language and embedding models: the OpenAI-compatible client, embedders, the vector upkeep and what the
calls cost."""
