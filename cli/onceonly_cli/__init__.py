"""The local `onceonly` command line: embedded servers, simulate, invoke, status.
Never part of the Lambda layer."""
