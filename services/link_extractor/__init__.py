"""The link extractor service: fetch.results -> urls.discovered."""
