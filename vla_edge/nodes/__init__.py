"""rclpy nodes: thin adapters from ROS messages to the cores.

Beside the nodes: the graph description that starts them (``graph.py``) and the
ROS-level fault suite run on that graph (``fault_suite.py``).
"""
