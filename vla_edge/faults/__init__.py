"""Fault scenarios and injectors."""
