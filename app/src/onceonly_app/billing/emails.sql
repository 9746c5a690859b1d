-- name: enqueue --
-- In: notification_key, tenant_id, invoice_id, kind, recipient, subject,
-- body_text. A key that is already there (a repeated effect) adds nothing.
INSERT INTO notifications (notification_key, tenant_id, invoice_id, kind, recipient, subject, body_text)
VALUES (%(notification_key)s, %(tenant_id)s, %(invoice_id)s, %(kind)s, %(recipient)s, %(subject)s,
        %(body_text)s)
ON CONFLICT (notification_key) DO NOTHING;
