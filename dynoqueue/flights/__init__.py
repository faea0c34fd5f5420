"""What the two flight demos share: the 2013 New York City flights as reminders
(:mod:`~dynoqueue.flights.data`) and the printers of their reports
(:mod:`~dynoqueue.flights.printing`).

``dynoqueue demo`` (:mod:`dynoqueue.demo`) and the Spark demo (:mod:`dynoqueue.spark.demo`) are
both built on it; neither imports the other.
"""
