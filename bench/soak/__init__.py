"""The chaos soak (issue 28): the deployment for hours under faults, measured and judged."""
