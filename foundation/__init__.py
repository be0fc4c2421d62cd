"""The platform every app builds on; see the README's "How it is built"."""
