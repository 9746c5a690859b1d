"""Sending one e-mail through Amazon SES (boto3 ``send_email``). The client is
injected; its endpoint comes from the environment (AWS_ENDPOINT_URL_SES in tests)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError


class SendError(Exception):
    """SES refused or could not take the message; ``code`` is its error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class SesNotifier:
    def __init__(self, client: Any, sender: str) -> None:
        self._client = client
        self._sender = sender

    def send(self, recipient: str, subject: str, body_text: str) -> str:
        """Send one plain-text e-mail; returns SES's message id. Raises SendError."""
        try:
            response = self._client.send_email(
                Source=self._sender,
                Destination={"ToAddresses": [recipient]},
                Message={"Subject": {"Data": subject, "Charset": "UTF-8"},
                         "Body": {"Text": {"Data": body_text, "Charset": "UTF-8"}}},
            )
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise SendError(str(error.get("Code", "ClientError")), str(error.get("Message", ""))) from exc
        except BotoCoreError as exc:
            raise SendError(type(exc).__name__, str(exc)) from exc
        return str(response["MessageId"])
