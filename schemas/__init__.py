"""The published event contract: Avro schemas, the schema-id registry and test vectors."""
