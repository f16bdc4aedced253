"""Processes: the embedded service, workers and the console script that wires them."""
