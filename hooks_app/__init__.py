"""Webhooks: per-owner subscriptions, the outbox of signed deliveries, and their attempts (docs/webhooks.md)."""
