"""What a run observes: metrics scraped from each component, and the time series of them."""
