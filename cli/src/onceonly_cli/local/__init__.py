"""What runs the functions and reads the stores on this machine, without Docker
or AWS; each module one job, taking plain typed arguments (never argparse):

- project: the project folder (template.yaml, functions/, node_modules/), decided once
- template: reads template.yaml as `sam local invoke` would
- lambda_runtime: loads a handler and gives it a Lambda context, in this process
- invoke, invoke_child: one function invocation in a child process
- invocation: `onceonly invoke`'s run: stores, migrations, the child, its output
- stores: which database and store a command uses, checked reachable
- ops: the existing database and store that status, redrive and subscriptions read
- scratch: a run's own database, Redis prefix or DynamoDB table, removed after
- status, redrive, prune, migrate: the operator commands' work
- subscriptions: the webhook subscription actions (add, list, rotate-secret, …)
- selftest, selftest_worker, selftest_targets: the multi-process race on a user's store
- selftest_session: one selftest against a store: checks, run, cleanup, result"""
