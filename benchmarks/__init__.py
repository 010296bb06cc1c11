"""Performance benchmarks (scripts, not tests): run ``python -m benchmarks.<name>``."""
