"""Webhook delivery: signed Standard Webhooks requests, exactly-once claims on
the onceonly due queue, fenced outcome records, retries and dead letters.

The functions in ``functions/webhook_*`` are thin wrappers around
:class:`onceonly_app.webhooks.service.WebhookService`."""
