"""The HTTP queue API: queues (topics with a share delivery order) served over HTTP."""
