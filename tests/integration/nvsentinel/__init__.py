"""The NVSentinel receivers, served for real on 127.0.0.1 and spoken to by real clients (gRPC,
CloudEvents over HTTP, their credentials, and the push-back of verdicts)."""
