"""NVSentinel's network side: the gRPC platform connector and the CloudEvents endpoint it feeds.

Kept together so the concept has one home in `workers/`, as it does in `goodput/detect/nvsentinel/`
and `activities/adapters/nvsentinel/` (docs/architecture.md's concept map)."""
