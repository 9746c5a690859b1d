"""The SQS hop from the payment watcher to the dispatcher.

The watcher sends its ``invoice.paid`` events with boto3 to a queue on moto's
server, exactly as it would to the template's WebhookQueue. simulate then plays
the Lambda event source mapping: it receives what is in that queue, deletes it
and hands the messages to the driver, which batches them to
WebhookDispatchFunction with the same redelivery rules as every other message."""

from __future__ import annotations

from typing import Any

from .loadgen import Message

RECEIVE_BATCH = 10  # ReceiveMessage's maximum


class SqsBridge:
    def __init__(self, endpoint: str, queue_name: str) -> None:
        import boto3

        self._sqs: Any = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                                      aws_access_key_id="testing", aws_secret_access_key="testing")
        self.queue_url: str = self._sqs.create_queue(QueueName=queue_name)["QueueUrl"]

    def take(self) -> list[Message]:
        """Every message waiting in the queue, removed from it."""
        taken: list[Message] = []
        while True:
            response = self._sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=RECEIVE_BATCH,
                                                 WaitTimeSeconds=0)
            messages = response.get("Messages") or []
            if not messages:
                break
            self._sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)])
            taken.extend(Message(m["MessageId"], m["Body"]) for m in messages)
        return taken

    def close(self) -> None:
        self._sqs.close()
