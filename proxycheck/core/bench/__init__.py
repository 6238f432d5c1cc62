"""Benchmarks: a load run's steady state and the statistics that compare two runs (`perf`)."""
