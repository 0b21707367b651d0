"""The bucket compressor service: fetch.results -> content store -> content.stored."""
