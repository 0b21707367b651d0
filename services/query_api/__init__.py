"""The query-api service: the HTTP query API over the index versions."""
