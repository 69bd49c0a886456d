"""The MCP server: tools and resources (`server`), where calls go (`targets`), the text a model reads (`text`),
the HTTP transport's session limit (`sessions`)."""
