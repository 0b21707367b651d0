"""The index-compactor service: a timer that builds, compacts and garbage-collects index versions."""
