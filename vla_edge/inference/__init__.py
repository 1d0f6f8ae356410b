"""The inference side's ROS-free core.

What the inference node and the virtual-time harness share: the newest-only
observation slot, camera health and the executed prefix.
"""
