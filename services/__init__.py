"""Service wiring packages, one per `crawlstream service <name>`."""
