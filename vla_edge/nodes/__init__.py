"""rclpy nodes: thin adapters from ROS messages to the cores."""
