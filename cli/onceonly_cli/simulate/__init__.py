"""`onceonly simulate`: the real functions as replica processes, fed duplicates
and crashes by a local stand-in for SQS and EventBridge, checked afterwards."""
