"""Model sources for the fetch-model stage: each writes `<out>/model/` and `<out>/source.json`."""
