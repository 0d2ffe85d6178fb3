"""Host bridge: text rendering, tool-call parsing, retrieval, customer wording."""
