-- A subscription's own settings (endpoint_settings.py): custom headers,
-- description, metadata. Written after the caller locked the row.

-- name: settings --
-- In: webhook_id. Out: its settings as they are, or NO row.
SELECT headers, description, metadata FROM webhook_subscriptions WHERE id = %(webhook_id)s;

-- name: set_settings --
-- In: webhook_id, headers (jsonb or NULL: keep), description (NULL: keep),
-- metadata (jsonb or NULL: keep).
UPDATE webhook_subscriptions
   SET headers = coalesce(%(headers)s::jsonb, headers),
       description = coalesce(%(description)s::text, description),
       metadata = coalesce(%(metadata)s::jsonb, metadata),
       updated_at = now()
 WHERE id = %(webhook_id)s AND deleted_at IS NULL;
