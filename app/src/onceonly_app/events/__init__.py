"""The webhook events the app emits, shared by the producers (billing) and the
delivery (webhooks), which never import each other:

- ``types``: the event types the app emits and their stable ids;
- ``limits``: the size limits of a payload, a message and a response;
- ``outbox``: the fan-out of an event to its tenant's subscriptions, in the
  change's transaction, and the flush of the outbox to the dispatcher's queue.
"""
