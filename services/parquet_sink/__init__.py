"""The parquet-sink service: content.stored + urls.records -> the Parquet lake."""
