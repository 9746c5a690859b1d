"""Webhook delivery: signed Standard Webhooks requests, exactly-once claims on
the onceonly due queue, fenced outcome records, retries and dead letters.

The functions in ``functions/webhook_*`` are thin wrappers around
:class:`onceonly_app.webhooks.service.WebhookService`, built per container by
``runtime``. The events it delivers come from ``onceonly_app.events``.

- ``service``: dispatch and retry orchestration (who attempts, what an outcome does);
- ``runtime``: the service as a Lambda container builds it, once;
- ``dispatch_batch``: one SQS batch of the dispatcher, record by record;
- ``lanes``: a batch's attempts concurrently, one lane in order;
- ``messages``: the SQS message that asks for a delivery;
- ``deliveries`` (+ ``.sql``): the delivery records (functions taking a connection);
- ``sender``, ``signing``, ``ssrf``, ``urls``, ``watchdog``: one attempt's
  request: pinned and checked address, signature, encoded URL, one deadline;
- ``backoff``: retry delays and Retry-After;
- ``endpoint_limits``, ``endpoint_health``, ``endpoint_settings``: per-endpoint
  limits, auto-disable of failing endpoints, headers and supplied secrets;
- ``subscriptions``, ``attempts``, ``recovery``, ``redrive``: the operations
  behind `onceonly subscriptions` and `onceonly redrive` (secret rotation is
  ``subscriptions.rotate_secret``);
- ``config``: the ``WEBHOOK_*`` settings.
"""
