"""The fetcher service: fetch.requests -> fetch.results."""
