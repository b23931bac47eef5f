"""Building blocks shared by all algorithms: models, distributions, filters, learners."""
