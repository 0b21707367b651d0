"""The scheduler service: urls.frontier + fetch.results -> fetch.requests, politely."""
