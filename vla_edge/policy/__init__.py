"""The VLA policy: encoders, fusion, flow-matching action head, training."""
