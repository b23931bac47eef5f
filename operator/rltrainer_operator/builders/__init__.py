"""Pure manifest builders: an experiment (and settings) in, a dict out. No API calls."""
