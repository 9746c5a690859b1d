-- Which coordination store the domain database was last set up for, and by
-- which stack (db/store_switch.py). Fences in this database (payment
-- cursors, job ticks, deliveries) hold tokens of that store: a new store's
-- tokens start again at 1, so the schema step resets them when the store
-- changes, and re-queues the deliveries whose queue items the old store kept.
-- One row: the database belongs to one stack at a time.
CREATE TABLE IF NOT EXISTS appdb_store_identity (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    store_kind      text NOT NULL,         -- postgresql | redis | dynamodb
    store_instance  text NOT NULL,         -- the random id the store itself keeps (a new or emptied store: a new id)
    store_location  text NOT NULL,         -- the store URL without credentials, for people
    stack           text,                  -- arn:…:stack/NAME (no run id: a recreated stack is the same); NULL: set up by hand
    recorded_at     timestamptz NOT NULL DEFAULT now()
);

-- Every repair, for the operator who asks what happened to the fences.
CREATE TABLE IF NOT EXISTS appdb_store_switches (
    id                   bigserial PRIMARY KEY,
    at                   timestamptz NOT NULL DEFAULT now(),
    reason               text NOT NULL,    -- first-record | switched | forced | stack-handover
    from_kind            text,
    from_instance        text,
    to_kind              text NOT NULL,
    to_instance          text NOT NULL,
    stack                text,
    cursors_reset        integer NOT NULL,
    ticks_reset          integer NOT NULL,
    deliveries_requeued  integer NOT NULL
);
