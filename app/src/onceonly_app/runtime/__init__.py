"""What every function runs on, whatever its domain:

- ``budget``: the one deadline mechanism (the time a run has left, shared out
  among its outside calls);
- ``tracing``: the handlers' tracer (Powertools Tracer only when tracing is on);
- ``aws``: boto3 clients with bounded timeouts and retries.
"""
