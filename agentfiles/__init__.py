"""agents-exe's agent-file language, as plain Python; see the README's "How it is built"."""
