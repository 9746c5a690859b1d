"""The local `onceonly` command line and the project's test kit. Never part of
the Lambda layer.

- main: the top parser, built from the command modules, and one-line failures
- errors: CliError and which failures are the user's (one line) or a bug (traceback)
- commands/: one module per command (register(subparsers), run(args) -> int)
- local/: what runs the functions and reads the stores on this machine (invoke,
  the template, the project folder, status, redrive, prune, migrate, subscriptions, selftest)
- simulate/: run(SimulationConfig) -> Report, the functions under duplicates and crashes
- testing/: the stand-ins tests, benchmarks and simulate share (receiver, fake
  payments API, history checker, local servers, broken store)"""
