"""What a run observes: request records from the load, sampled time series, events."""
