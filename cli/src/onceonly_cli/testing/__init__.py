"""The local stand-ins that tests, the benchmarks and `onceonly simulate` run
against, imported openly by each (``from onceonly_cli.testing import receiver``):

- receiver: a webhook receiver that verifies signatures and records every request
- fake_payments: a Horizon-style payments API
- history: operation histories of multi-process runs, and their checker
- servers: PostgreSQL, Redis, dynalite and moto on 127.0.0.1, stopped together
- redis_cluster: a 6-node Redis Cluster on loopback ports
- reaper: the watcher that stops the servers if their starter is killed
- dynalite_launcher.js: keeps dynalite serving when a client dies mid-request
- standins: what ``--store postgresql|redis|dynamodb|…`` starts or reuses
- breakage: a deliberately non-atomic store, to prove the checks can fail"""
